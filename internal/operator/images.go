package operator

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// ImageCase names why the member pods may run an image, or that they may not.
type ImageCase string

const (
	// ImageUnrestricted: the operator has no allowlist (--allowed-images empty): any image.
	ImageUnrestricted ImageCase = "Unrestricted"
	// ImageOperatorDefault: the operator's default member image (its own, or --member-image),
	// which the operator's administrators chose: always allowed.
	ImageOperatorDefault ImageCase = "OperatorDefault"
	// ImageListed: a pattern of the allowlist matches the whole reference.
	ImageListed ImageCase = "Listed"
	// ImageNotAllowed: none matches: the member pods are neither created nor changed.
	ImageNotAllowed ImageCase = "NotAllowed"
)

// ErrImageNotAllowed is the code of a member image the allowlist refuses.
const ErrImageNotAllowed = "ERR_IMAGE_NOT_ALLOWED"

// ReasonImageNotAllowed is the Warning Event of a refused member image.
const ReasonImageNotAllowed = "ImageNotAllowed"

// memberImage is the image the member pods run: spec.image, else the operator's default.
func memberImage(ec *v1alpha1.EtcdCluster, defaultImage string) string {
	if ec.Spec.Image != "" {
		return ec.Spec.Image
	}
	return defaultImage
}

// decideImage decides whether the member pods may run image. A pattern is a path.Match glob
// over the whole reference as written, so `*` never crosses a `/`: registry.example.com/steward:*
// allows every tag (and tag@digest) of that repository and nothing of another.
func decideImage(image, defaultImage string, allowed []string) ImageCase {
	switch {
	case len(allowed) == 0:
		return ImageUnrestricted
	case image == defaultImage:
		return ImageOperatorDefault
	}
	for _, p := range allowed {
		if ok, _ := path.Match(p, image); ok { // patterns are checked when the operator starts
			return ImageListed
		}
	}
	return ImageNotAllowed
}

// imageRefusal is the error of a member image the allowlist refuses, naming it, the flag and
// what to do; nil when the image may run.
func imageRefusal(ec *v1alpha1.EtcdCluster, defaultImage string, allowed []string) error {
	image := memberImage(ec, defaultImage)
	if decideImage(image, defaultImage, allowed) != ImageNotAllowed {
		return nil
	}
	return fmt.Errorf("spec.image %q is not allowed by the operator (--allowed-images %s; and its default member image %q): "+
		"the member pods are not created or changed; set spec.image to an image these patterns match, remove it to run the default, "+
		"or ask the operator's administrators to allow the image", image, strings.Join(allowed, ","), defaultImage)
}

// CheckImagePatterns refuses a malformed --allowed-images pattern, so that the operator does
// not start with a list it cannot apply.
func CheckImagePatterns(patterns []string) error {
	var errs []error
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsFunc(p, unicode.IsSpace) {
			errs = append(errs, fmt.Errorf("--allowed-images: %q is not a pattern (path.Match syntax: * ? [class], matched against the whole image reference, e.g. registry.example.com/steward:*)", p))
		}
	}
	return errors.Join(errs...)
}
