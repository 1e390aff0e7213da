package operator

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecideVolumeExpansion(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	q := resource.MustParse
	small, big := q("8Gi"), q("16Gi")
	recorded := &v1alpha1.VolumeExpansionStatus{Size: big, Phase: v1alpha1.VolumeExpansionResizingClaims, Since: metav1.NewTime(now.Add(-time.Minute))}
	claim := func(name string, size resource.Quantity) claimObservation {
		return claimObservation{Name: name, Size: size, Owned: true, Bound: true}
	}
	cases := []struct {
		name     string
		in       expansionInput
		want     ExpansionCase
		resize   []string
		refusal  string
		recorded bool
	}{
		{"no StatefulSet yet", expansionInput{Want: big}, ExpansionNone, nil, "", false},
		{"the claim template has the size", expansionInput{Want: big, Template: &big}, ExpansionNone, nil, "", false},
		{"grown: the record goes", expansionInput{Want: big, Template: &big, Record: recorded}, ExpansionDone, nil, "", false},
		{"the size recorded before any claim changes",
			expansionInput{Want: big, Template: &small, Claims: []claimObservation{claim("data-c-0", small)}}, ExpansionRecord, nil, "", true},
		{"a larger size asked meanwhile is recorded anew",
			expansionInput{Want: q("32Gi"), Template: &small, Claims: []claimObservation{claim("data-c-0", small)}, Record: recorded}, ExpansionRecord, nil, "", true},
		{"the claims below the size are asked for it",
			expansionInput{Want: big, Template: &small, Record: recorded,
				Claims: []claimObservation{claim("data-c-0", big), claim("data-c-1", small), claim("data-c-2", small)}},
			ExpansionResizeClaims, []string{"data-c-1", "data-c-2"}, "", true},
		{"the StorageClass does not allow expansion: nothing done",
			expansionInput{Want: big, Template: &small,
				Claims: []claimObservation{{Name: "data-c-0", Size: small, Owned: true, Bound: true, ClassProblem: "its StorageClass std does not allow volume expansion (allowVolumeExpansion)"}}},
			ExpansionNotAllowed, nil, "allowVolumeExpansion", false},
		{"a claim not the StatefulSet's: nothing done",
			expansionInput{Want: big, Template: &small, Record: recorded,
				Claims: []claimObservation{claim("data-c-0", small), {Name: "data-c-1", Size: small}}},
			ExpansionClaimNotOwned, nil, "data-c-1", true},
		{"a claim not bound yet waits",
			expansionInput{Want: big, Template: &small, Record: recorded, Claims: []claimObservation{claim("data-c-0", small), {Name: "data-c-1", Size: small, Owned: true}}},
			ExpansionWaitClaimBound, nil, "", true},
		{"every claim asks for it: the StatefulSet made anew",
			expansionInput{Want: big, Template: &small, Record: recorded, Claims: []claimObservation{claim("data-c-0", big)}},
			ExpansionRecreateStatefulSet, nil, "", true},
		{"a claim that grew needs no class check",
			expansionInput{Want: big, Template: &small, Record: recorded,
				Claims: []claimObservation{{Name: "data-c-0", Size: big, Owned: true, Bound: true, ClassProblem: "gone"}}},
			ExpansionRecreateStatefulSet, nil, "", true},
		{"not during a rolling update",
			expansionInput{Want: big, Template: &small, Record: recorded, Busy: "the rolling update", Claims: []claimObservation{claim("data-c-0", big)}},
			ExpansionWaitStatefulSet, nil, "", true},
		{"the old StatefulSet still going", expansionInput{Want: big, Template: &small, Deleting: true, Record: recorded}, ExpansionWaitStatefulSet, nil, "", true},
		{"deleted, not made anew yet: the record stays", expansionInput{Want: big, Record: recorded}, ExpansionWaitStatefulSet, nil, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideVolumeExpansion(tc.in, now)
			if d.Case != tc.want || strings.Join(d.Resize, ",") != strings.Join(tc.resize, ",") {
				t.Fatalf("got %s %v; want %s %v", d.Case, d.Resize, tc.want, tc.resize)
			}
			if !strings.Contains(d.Refusal, tc.refusal) || (tc.refusal == "") != (d.Refusal == "") {
				t.Errorf("refusal %q; want one naming %q", d.Refusal, tc.refusal)
			}
			if (d.Record != nil) != tc.recorded {
				t.Fatalf("record %+v; want one: %v", d.Record, tc.recorded)
			}
			if d.Record != nil && d.Record != tc.in.Record && d.Record.Size.Cmp(tc.in.Want) != 0 {
				t.Errorf("record of %s; want %s", d.Record.Size.String(), tc.in.Want.String())
			}
		})
	}
	// The record keeps the time it was first made.
	d := decideVolumeExpansion(expansionInput{Want: big, Template: &small, Record: recorded, Claims: []claimObservation{claim("data-c-0", small)}}, now)
	if !d.Record.Since.Equal(&recorded.Since) {
		t.Errorf("since %v; want %v", d.Record.Since, recorded.Since)
	}
}
