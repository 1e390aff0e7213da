package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// credentialsRefresh is how long S3 credentials read from a credentials directory are used
// before they are read again: the most a rotation of the files takes to reach an open store.
// (Azure keys and SAS tokens, and Google keys, are read again at every request.)
var credentialsRefresh = 30 * time.Second

// credentialsDir is a directory holding a store's credentials, one file per variable, named
// like it (a mounted Secret whose keys are the variables' names).
type credentialsDir string

// what each credentials file holds, for the error that says what to put in it.
var credentialFileHolds = map[string]string{
	"AWS_ACCESS_KEY_ID":              "the access key ID",
	"AWS_SECRET_ACCESS_KEY":          "the secret access key",
	"AZURE_STORAGE_ACCOUNT":          "the storage account's name",
	"AZURE_STORAGE_KEY":              "the storage account's shared key (base64)",
	"AZURE_STORAGE_SAS_TOKEN":        "a SAS token (sv=…&sig=…)",
	"GOOGLE_APPLICATION_CREDENTIALS": "the service-account key file's JSON content",
}

// read returns the content of file name, without surrounding white space. A missing, empty
// or unreadable file is an error naming it and what to put in it; the content is never part
// of an error.
func (d credentialsDir) read(name string) (string, error) {
	v, ok, err := d.readOptional(name)
	if err == nil && !ok {
		err = fmt.Errorf("credentials file %s does not exist: put %s in it", d.path(name), credentialFileHolds[name])
	}
	return v, err
}

// readOptional is read for a file that may be absent: ok is false if it is.
func (d credentialsDir) readOptional(name string) (value string, ok bool, err error) {
	b, err := os.ReadFile(d.path(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named below
		}
		return "", false, fmt.Errorf("cannot read credentials file %s: %w: fix its permissions", d.path(name), err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		what := credentialFileHolds[name]
		if what == "" {
			what = "a value"
		}
		return "", false, fmt.Errorf("credentials file %s is empty: put %s in it, or remove it", d.path(name), what)
	}
	return v, true, nil
}

func (d credentialsDir) path(name string) string { return filepath.Join(string(d), name) }

// settings puts what the directory says about where the store is (the S3 region, the Azure
// storage account) into the store URL's query q, unless the URL says it already.
func (d credentialsDir) settings(scheme string, q url.Values) error {
	var param string
	var files []string
	switch scheme {
	case "s3":
		param, files = "region", []string{"AWS_REGION", "AWS_DEFAULT_REGION"}
	case "azblob":
		param, files = "storage_account", []string{"AZURE_STORAGE_ACCOUNT"}
	}
	if param == "" || q.Get(param) != "" {
		return nil
	}
	for _, name := range files {
		v, ok, err := d.readOptional(name)
		if err != nil {
			return err
		}
		if ok {
			q.Set(param, v)
			return nil
		}
	}
	if scheme == "azblob" {
		return fmt.Errorf("credentials file %s does not exist: put %s in it (or give ?storage_account= in the store URL)", d.path("AZURE_STORAGE_ACCOUNT"), credentialFileHolds["AZURE_STORAGE_ACCOUNT"])
	}
	return nil
}

// openCloudWithCredentials opens bucket URL bu (query included; no key prefix) of scheme s3,
// gs or azblob with the credentials in dir, which are read again while the bucket is open.
func openCloudWithCredentials(ctx context.Context, bu *url.URL, dir credentialsDir) (*blob.Bucket, error) {
	switch bu.Scheme {
	case "s3":
		return openS3WithCredentials(ctx, bu, dir)
	case "azblob":
		return openAzureWithCredentials(ctx, bu, dir)
	}
	return openGoogleWithCredentials(ctx, bu, dir)
}

// s3Credentials reads the AWS keys from a credentials directory. Each read is good for
// credentialsRefresh, after which aws.CredentialsCache reads them again.
type s3Credentials struct{ dir credentialsDir }

func (c s3Credentials) Retrieve(context.Context) (aws.Credentials, error) {
	id, err := c.dir.read("AWS_ACCESS_KEY_ID")
	if err != nil {
		return aws.Credentials{}, err
	}
	secret, err := c.dir.read("AWS_SECRET_ACCESS_KEY")
	if err != nil {
		return aws.Credentials{}, err
	}
	token, _, err := c.dir.readOptional("AWS_SESSION_TOKEN")
	if err != nil {
		return aws.Credentials{}, err
	}
	return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token, Source: "credentials directory " + string(c.dir),
		CanExpire: true, Expires: time.Now().Add(credentialsRefresh)}, nil
}

// s3CredentialParams choose where S3 credentials come from, as a credentials directory does.
var s3CredentialParams = []string{"profile", "role", "anonymous"}

// openS3WithCredentials builds the S3 client as gocloud's s3blob.URLOpener does for the same
// query parameters, with the credentials of dir in place of the SDK's default chain.
func openS3WithCredentials(ctx context.Context, bu *url.URL, dir credentialsDir) (*blob.Bucket, error) {
	q := bu.Query()
	for _, p := range s3CredentialParams {
		if q.Has(p) {
			return nil, fmt.Errorf("the query parameter %s chooses the credentials, and so does the credentials directory %s: use one of them", p, dir)
		}
	}
	// Checked now, so that a missing file is named at Open rather than as a failed listing.
	creds := s3Credentials{dir}
	if _, err := creds.Retrieve(ctx); err != nil {
		return nil, err
	}
	var opts blobOptsS3
	if err := opts.take(q); err != nil {
		return nil, err
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	cfg.Credentials = aws.NewCredentialsCache(creds)
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UseAccelerate = opts.accelerate
		o.UsePathStyle = opts.pathStyle
		o.EndpointOptions.DisableHTTPS = opts.disableHTTPS
	})
	return s3blob.OpenBucket(ctx, client, bu.Host, &s3blob.Options{EncryptionType: opts.sse, KMSEncryptionID: opts.kmsKeyID,
		// The upload manager takes the checksum setting from here only.
		RequestChecksumCalculation: cfg.RequestChecksumCalculation})
}

// blobOptsS3 are the S3 query parameters s3blob's URL opener reads besides those of
// gocloud's AWS configuration.
type blobOptsS3 struct {
	accelerate, pathStyle, disableHTTPS bool
	sse                                 s3types.ServerSideEncryption
	kmsKeyID                            string
}

// take reads the parameters into o and removes them from q.
func (o *blobOptsS3) take(q url.Values) error {
	for key, dst := range map[string]*bool{"accelerate": &o.accelerate, "use_path_style": &o.pathStyle, "s3ForcePathStyle": &o.pathStyle, "disable_https": &o.disableHTTPS} {
		if v := q.Get(key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("invalid value for %q: %w", key, err)
			}
			*dst = b
		}
		q.Del(key)
	}
	if v := q.Get("ssetype"); v != "" {
		for _, t := range s3types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				o.sse = t
			}
		}
		if o.sse == "" {
			return fmt.Errorf("%q is not a valid value for \"ssetype\"", v)
		}
	}
	o.kmsKeyID = q.Get("kmskeyid")
	q.Del("ssetype")
	q.Del("kmskeyid")
	return nil
}

// openAzureWithCredentials opens an Azure container with the storage account and the shared
// key or SAS token of dir, read again at every request.
func openAzureWithCredentials(ctx context.Context, bu *url.URL, dir credentialsDir) (*blob.Bucket, error) {
	// The environment's SAS token is not used: the directory's is added to each request. The
	// account is in the query (see settings).
	svc := *azureblob.NewDefaultServiceURLOptions()
	svc.SASToken = ""
	account := bu.Query().Get("storage_account")
	key, haveKey, err := dir.readOptional("AZURE_STORAGE_KEY")
	if err != nil {
		return nil, err
	}
	var makeClient func(containerURL string) (*container.Client, error)
	if haveKey {
		cred, err := container.NewSharedKeyCredential(account, key)
		if err != nil {
			return nil, fmt.Errorf("credentials file %s does not hold a shared key: put %s in it", dir.path("AZURE_STORAGE_KEY"), credentialFileHolds["AZURE_STORAGE_KEY"])
		}
		makeClient = func(containerURL string) (*container.Client, error) {
			return container.NewClientWithSharedKeyCredential(containerURL, cred, azureOptions(azureKeyRefresh{dir, cred}))
		}
	} else {
		if _, haveSAS, err := dir.readOptional("AZURE_STORAGE_SAS_TOKEN"); err != nil {
			return nil, err
		} else if !haveSAS {
			return nil, fmt.Errorf("credentials directory %s holds neither AZURE_STORAGE_KEY nor AZURE_STORAGE_SAS_TOKEN: put the storage account's shared key in the one or a SAS token in the other", dir)
		}
		if _, err := (azureSAS{dir}).token(); err != nil {
			return nil, err
		}
		makeClient = func(containerURL string) (*container.Client, error) {
			return container.NewClientWithNoCredential(containerURL, azureOptions(azureSAS{dir}))
		}
	}
	opener := &azureblob.URLOpener{ServiceURLOptions: svc,
		MakeClient: func(svcURL azureblob.ServiceURL, name azureblob.ContainerName) (*container.Client, error) {
			containerURL, err := url.JoinPath(string(svcURL), string(name))
			if err != nil {
				return nil, err
			}
			return makeClient(containerURL)
		}}
	return opener.OpenBucketURL(ctx, bu)
}

func azureOptions(p policy.Policy) *container.ClientOptions {
	return &container.ClientOptions{ClientOptions: azcore.ClientOptions{PerCallPolicies: []policy.Policy{p}}}
}

// azureKeyRefresh sets the shared key from its file before each request is signed.
type azureKeyRefresh struct {
	dir  credentialsDir
	cred *container.SharedKeyCredential
}

func (p azureKeyRefresh) Do(req *policy.Request) (*http.Response, error) {
	key, err := p.dir.read("AZURE_STORAGE_KEY")
	if err != nil {
		return nil, err
	}
	if err := p.cred.SetAccountKey(key); err != nil {
		return nil, fmt.Errorf("credentials file %s does not hold a shared key: put %s in it", p.dir.path("AZURE_STORAGE_KEY"), credentialFileHolds["AZURE_STORAGE_KEY"])
	}
	return req.Next()
}

// azureSAS adds the SAS token of its file to each request.
type azureSAS struct{ dir credentialsDir }

func (p azureSAS) token() (url.Values, error) {
	raw, err := p.dir.read("AZURE_STORAGE_SAS_TOKEN")
	if err != nil {
		return nil, err
	}
	v, err := url.ParseQuery(strings.TrimPrefix(raw, "?"))
	if err != nil || !v.Has("sig") {
		return nil, fmt.Errorf("credentials file %s does not hold a SAS token: put %s in it", p.dir.path("AZURE_STORAGE_SAS_TOKEN"), credentialFileHolds["AZURE_STORAGE_SAS_TOKEN"])
	}
	return v, nil
}

func (p azureSAS) Do(req *policy.Request) (*http.Response, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	u := req.Raw().URL
	q := u.Query()
	for k, v := range tok {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return req.Next()
}

// openGoogleWithCredentials opens a Cloud Storage bucket with the service-account key in dir.
func openGoogleWithCredentials(ctx context.Context, bu *url.URL, dir credentialsDir) (*blob.Bucket, error) {
	ts := &googleTokens{dir: dir}
	if _, err := ts.source(); err != nil {
		return nil, err
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), ts)
	if err != nil {
		return nil, err
	}
	opener := &gcsblob.URLOpener{Client: client, TokenSource: ts}
	return opener.OpenBucketURL(ctx, bu)
}

// googleTokens issues tokens for the service-account key in its directory, and starts over
// from the key when the file changes.
type googleTokens struct {
	dir credentialsDir

	mu  sync.Mutex
	key []byte
	ts  oauth2.TokenSource
}

func (g *googleTokens) Token() (*oauth2.Token, error) {
	ts, err := g.source()
	if err != nil {
		return nil, err
	}
	return ts.Token()
}

// source is the token source of the key the file holds now.
func (g *googleTokens) source() (oauth2.TokenSource, error) {
	const name = "GOOGLE_APPLICATION_CREDENTIALS"
	v, err := g.dir.read(name)
	if err != nil {
		return nil, err
	}
	key := []byte(v)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ts != nil && bytes.Equal(key, g.key) {
		return g.ts, nil
	}
	if !json.Valid(key) {
		if !strings.ContainsAny(v, "{}\n") {
			return nil, fmt.Errorf("credentials file %s holds a file name, not a key: put %s in it, not its path", g.dir.path(name), credentialFileHolds[name])
		}
		return nil, fmt.Errorf("credentials file %s does not hold JSON: put %s in it", g.dir.path(name), credentialFileHolds[name])
	}
	creds, err := google.CredentialsFromJSONWithType(context.Background(), key, google.ServiceAccount, "https://www.googleapis.com/auth/devstorage.read_write")
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w: put %s in it", g.dir.path(name), err, credentialFileHolds[name])
	}
	g.key, g.ts = key, oauth2.ReuseTokenSource(nil, creds.TokenSource)
	return g.ts, nil
}
