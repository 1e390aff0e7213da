// Command s3 is the e2e suite's object store: a server speaking the real S3 wire protocol
// (gofakes3, as the unit tests use), kept in a bbolt file on its own volume, so that backups
// survive the loss of every etcd member.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
)

func main() {
	db := flag.String("db", "/data/s3.db", "bbolt file holding the buckets")
	addr := flag.String("listen", ":9000", "address to serve S3 on")
	bucket := flag.String("bucket", "backups", "bucket created at start")
	flag.Parse()
	be, err := s3bolt.NewFile(*db)
	if err != nil {
		log.Fatalf("opening %s: %v", *db, err)
	}
	if err := be.CreateBucket(*bucket); err != nil && !gofakes3.IsAlreadyExists(err) {
		log.Fatalf("creating bucket %s: %v", *bucket, err)
	}
	log.Printf("serving S3 on %s (bucket %s)", *addr, *bucket)
	log.Fatal(http.ListenAndServe(*addr, gofakes3.New(be).Server()))
}
