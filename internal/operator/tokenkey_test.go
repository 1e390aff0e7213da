package operator

import (
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

func TestDecideTokenKeyRotation(t *testing.T) {
	recorded := &v1alpha1.TokenKeyRotationStatus{Request: "2"}
	cases := []struct {
		name string
		in   tokenKeyInput
		want TokenKeyCase
	}{
		{"no annotation", tokenKeyInput{Auth: true}, TokenKeyNone},
		{"the annotation's renewal is done", tokenKeyInput{Request: "1", Rotated: "1", Auth: true}, TokenKeyNone},
		{"a new value, no authentication: no key to renew", tokenKeyInput{Request: "2", Rotated: "1"}, TokenKeyRefused},
		{"a new value: recorded before any key is made", tokenKeyInput{Request: "2", Rotated: "1", Auth: true}, TokenKeyRecord},
		{"the first value ever", tokenKeyInput{Request: "1", Auth: true}, TokenKeyRecord},
		{"recorded, the Secret holds an older key: made now", tokenKeyInput{Request: "2", Rotation: recorded, Auth: true, Minted: "1"}, TokenKeyMint},
		{"recorded, the Secret is gone: made now", tokenKeyInput{Request: "2", Rotation: recorded, Auth: true}, TokenKeyMint},
		{"recorded, the Secret holds its key: done", tokenKeyInput{Request: "2", Rotation: recorded, Auth: true, Minted: "2"}, TokenKeyDone},
		{"recorded, then the annotation removed: carried out", tokenKeyInput{Rotation: recorded, Auth: true, Minted: "1"}, TokenKeyMint},
		{"recorded, then a newer value: this one done first", tokenKeyInput{Request: "3", Rotation: recorded, Auth: true, Minted: "2"}, TokenKeyDone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideTokenKeyRotation(tc.in); got != tc.want {
				t.Errorf("decideTokenKeyRotation(%+v) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
