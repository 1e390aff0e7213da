package operator

import (
	"errors"
	"fmt"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/member"
	"github.com/etcd-steward/steward/internal/units"
)

// specProblem is the first setting of the spec that the API server cannot check (the CRD's
// rules check the rest) and that the members could not run with: a sidecar refuses a schedule
// it cannot read, and etcd fills its volume before a quota larger than the volume raises
// NOSPACE. Its error names the field and what to write instead; nil when there is none.
func specProblem(spec v1alpha1.EtcdClusterSpec) error {
	// off is the word that turns a schedule off ("" when it cannot be).
	type schedule struct{ field, value, off string }
	var schedules []schedule
	if b := spec.Backup; b != nil {
		schedules = append(schedules, schedule{"spec.backup.fullSchedule", b.FullSchedule, ""},
			schedule{"spec.backup.drillSchedule", b.DrillSchedule, agent.DrillOff})
	}
	if m := spec.Maintenance; m != nil {
		schedules = append(schedules, schedule{"spec.maintenance.defragSchedule", m.DefragSchedule, member.MaintenanceOff})
	}
	for _, s := range schedules {
		if s.value == "" || (s.off != "" && s.value == s.off) {
			continue
		}
		if _, err := units.ParseSchedule(s.value); err != nil {
			also := ""
			if s.off != "" {
				also = fmt.Sprintf(", or %q for none", s.off)
			}
			return fmt.Errorf("%s %q is not a cron schedule (%v): write 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\"), "+
				"@hourly, @daily, @weekly, @monthly or @every <duration> (e.g. @every 30m)%s", s.field, s.value, err, also)
		}
	}
	if q := spec.Etcd.QuotaBackendBytes; q != nil {
		if q.Sign() <= 0 {
			return fmt.Errorf("spec.etcd.quotaBackendBytes %s: give a positive size (e.g. 2Gi, etcd's default), or remove it", q)
		}
		if size := spec.Storage.Size; size != nil && q.Cmp(*size) > 0 {
			return fmt.Errorf("spec.etcd.quotaBackendBytes %s is larger than each member's volume (spec.storage.size %s): etcd would fill the volume "+
				"before it raises NOSPACE, and stop; set it below %s, leaving room for the write-ahead log and snapshots "+
				"(or grow spec.storage.size, with a StorageClass that allows volume expansion)", q, size, size)
		}
	}
	return nil
}

// securityProblem refuses to turn authentication on for a cluster without TLS: the root
// password that Steward's clients log in with would cross the pod network in clear. The CRD
// refuses a spec that says both; this catches spec.tls left out on a cluster whose defaults
// have no TLS (it existed before Steward defaulted to TLS). A cluster whose authentication is
// already on (status.rootPasswordSecret) keeps it.
func securityProblem(ec *v1alpha1.EtcdCluster) error {
	if !authEnabled(ec) || TLSEnabled(ec) || ec.Status.RootPasswordSecret != "" {
		return nil
	}
	return errors.New("spec.auth.enabled: true needs TLS, and this cluster runs without it (status.defaults.tls is false: it existed before Steward defaulted to TLS, " +
		"and TLS is chosen when a cluster is created): the root password that Steward's clients log in with would cross the pod network in clear; " +
		"remove spec.auth, or move the data to a new EtcdCluster, which gets TLS (spec.bootstrap.restore from this one's backups)")
}
