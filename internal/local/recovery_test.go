package local

import (
	"testing"

	"github.com/etcd-steward/steward/internal/member"
)

func TestChooseRecovery(t *testing.T) {
	tests := []struct {
		name     string
		datas    []memberData
		backup   bool
		wantOK   bool
		wantMode string
		wantSeed string
	}{
		{name: "majority holds valid data: no directive, they restart",
			datas: []memberData{{Name: "m0", Own: true, Revision: 5}, {Name: "m1", Serving: true, Revision: 9}, {Name: "m2"}}},
		{name: "one survivor: it seeds",
			datas: []memberData{{Name: "m0"}, {Name: "m1", Serving: true, Revision: 9}, {Name: "m2"}}, wantOK: true, wantMode: member.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "two survivors of five: the one with the highest revision seeds (no acknowledged write lost)",
			datas:  []memberData{{Name: "m0", Own: true, Revision: 90}, {Name: "m1"}, {Name: "m2"}, {Name: "m3", Own: true, Revision: 91}, {Name: "m4"}},
			wantOK: true, wantMode: member.RecoverFromSurvivor, wantSeed: "m3"},
		{name: "equal revisions: the first name seeds",
			datas:  []memberData{{Name: "m2", Own: true, Revision: 7}, {Name: "m1", Own: true, Revision: 7}, {Name: "m0"}, {Name: "m3"}, {Name: "m4"}},
			wantOK: true, wantMode: member.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "foreign volumes do not count as survivors",
			datas:  []memberData{{Name: "m0", Revision: 50}, {Name: "m1", Own: true, Revision: 40}, {Name: "m2", Revision: 50}},
			wantOK: true, wantMode: member.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "no valid data, backups: restore",
			datas: []memberData{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}, backup: true, wantOK: true, wantMode: member.RecoverFromBackup, wantSeed: "m0"},
		{name: "no valid data, no backups: nothing automatic (never an empty new cluster)",
			datas: []memberData{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok, why := chooseRecovery(tt.datas, len(tt.datas), tt.backup, 7)
			if ok != tt.wantOK || r.Mode != tt.wantMode || r.Seed != tt.wantSeed || why == "" {
				t.Fatalf("chooseRecovery = %+v, %t, %q; want ok %t mode %q seed %q", r, ok, why, tt.wantOK, tt.wantMode, tt.wantSeed)
			}
			if ok && r.Epoch != 7 {
				t.Fatalf("epoch %d", r.Epoch)
			}
		})
	}
}
