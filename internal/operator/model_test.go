package operator

// The model test drives the operator's real decisions (Decide, with the quorum probe the
// reconciler makes before a fence, and the real leaseClock) through generated sequences of
// Kubernetes events on an abstract world of pods, Leases, EtcdMember reports, nodes and etcd
// members, and checks every state reached. docs/architecture.md ("The operator's model
// test") says what it covers and what it leaves out.

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

var modelSequences = flag.Int("model.sequences", 0, "generated sequences of the operator's model test per cluster size (default 1000 for 3 members, 300 for 5; or STEWARD_MODEL_SEQUENCES)")

// The model's timing: short graces, so that sequences of a few minutes reach every decision.
var (
	modelGraces   = Graces{Unknown: 20 * time.Second, NotReady: 30 * time.Second, Volume: time.Minute, Rollout: time.Minute, CAPropagation: time.Minute}
	modelTiming   = heal.Timing{Grace: modelGraces.NotReady, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute}
	modelLeaseTTL = 15 * time.Second
	// modelRenew is how often a sidecar renews its Lease and rewrites its report.
	modelRenew = 5 * time.Second
	// modelMaxMembers bounds scale requests (ordinals 0..modelMaxMembers-1).
	modelMaxMembers = 5
)

// mEtcdMember is one entry of an incarnation's member list.
type mEtcdMember struct {
	id      string
	name    string
	learner bool
}

// mInc is one raft group: the bootstrap, or what a force-new-cluster or a restore starts.
type mInc struct {
	clusterID  string
	term       uint64
	members    []mEtcdMember
	history    int // writes committed
	superseded bool
}

// mData is what a member's volume holds.
type mData struct {
	inc   int
	id    string
	log   int
	epoch int64
}

// mPod is a member pod as the API server holds it.
type mPod struct {
	uid      int
	created  time.Time // the API server's clock
	ready    bool      // as the kubelet (or the node controller) last set it
	deleting bool      // deletion requested, not done (its node is lost)
}

type mMember struct {
	name    string
	ordinal int
	pod     *mPod
	etcd    bool // etcd runs in the pod
	data    *mData
	// nodeLost: the node is partitioned away: its etcd (if it runs) reaches nobody, its
	// kubelet and sidecar reach no API server, and a deletion of its pod stays pending.
	nodeLost bool
	// outOfService: the lost node is marked out of service, so known to be off; the member's
	// volume is pinned to it (a local disk). claim counts the member's data claims.
	outOfService bool
	claim        int
	// skew is the node's clock minus the API server's.
	skew time.Duration
	// leaseFrozen: the sidecar's Lease writes are refused; reportFrozen: its EtcdMember
	// status writes are.
	leaseFrozen, reportFrozen bool
	// The member's Lease and EtcdMember as the API server holds them.
	leaseUID   int
	holder     string
	renewTime  time.Time
	report     *cluster.Report
	ack        *cluster.DirectiveAck
	lastReport time.Time
}

// mAPI is what the operator reads through its cache: a copy of the API objects at a moment.
type mAPI struct {
	seq           int
	ec            *v1alpha1.EtcdCluster
	stsReplicas   int32
	stsVersion    int
	configMembers int32
	configFenced  []string
	pods          map[string]mPod
	leases        map[string]coordinationv1.Lease
	reports       map[string]cluster.Report
	acks          map[string]cluster.DirectiveAck
}

type opModel struct {
	rng  *rand.Rand
	now  time.Time // the API server's clock
	incs []*mInc
	mems []*mMember
	ec   *v1alpha1.EtcdCluster
	// ecVersion is the EtcdCluster's resourceVersion.
	ecVersion     int
	stsReplicas   int32
	stsVersion    int
	configMembers int32
	// configFenced are the fences the ConfigMap carries, which the sidecars hold.
	configFenced []string
	backup       int // newest write backed up; -1: no backup store
	// mustKeep is the newest acknowledged write some voter's data (or the backup) still holds.
	mustKeep int
	nextID   int
	nextUID  int
	// The operator: its clock's skew, its lease clock (lost on a restart), its cache.
	opSkew    time.Duration
	leases    *leaseClock
	history   []mAPI
	snapshots int
	cacheSeq  int
	cacheLags bool
	// apiFlaky: the operator's writes fail at random.
	apiFlaky bool
	// lastEpoch is the highest epoch ever stored; fenced the pods fenced, by UID, with the
	// epoch that fenced them.
	lastEpoch int64
	fenced    map[int]int64
	trace     []string
	violation string
}

const modelNS = "ns"

func newOpModel(seed int64, size int) *opModel {
	m := &opModel{rng: rand.New(rand.NewSource(seed)), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), backup: -1,
		leases: &leaseClock{}, fenced: map[int]int64{}}
	if seed%2 == 0 {
		m.backup = 0
	}
	m.ec = &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: modelNS, Name: "c", UID: "c-uid", Annotations: map[string]string{}},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: int32(size)}}
	inc := &mInc{clusterID: m.newID(), term: 1}
	for i := 0; i < modelMaxMembers; i++ {
		mm := &mMember{name: fmt.Sprintf("c-%d", i), ordinal: i, leaseUID: m.uid()}
		m.mems = append(m.mems, mm)
		if i < size {
			id := m.newID()
			inc.members = append(inc.members, mEtcdMember{id: id, name: mm.name})
			mm.data = &mData{id: id}
			mm.pod = &mPod{uid: m.uid(), created: m.now}
			mm.etcd = true
		}
	}
	m.incs = []*mInc{inc}
	m.stsReplicas, m.configMembers = int32(size), int32(size)
	m.snapshot()
	return m
}

func (m *opModel) newID() string { m.nextID++; return fmt.Sprintf("%x", 0x1000+m.nextID) }
func (m *opModel) uid() int      { m.nextUID++; return m.nextUID }

func (m *opModel) failf(format string, args ...any) {
	if m.violation == "" {
		m.violation = fmt.Sprintf(format, args...)
	}
}

func (m *opModel) logf(format string, args ...any) {
	m.trace = append(m.trace, "    "+fmt.Sprintf(format, args...))
}

// --- ground truth ---

// connected: the member's etcd runs, on data, and reaches its peers.
func (m *opModel) connected(mm *mMember) bool {
	return mm.etcd && !mm.nodeLost && mm.data != nil
}

// entry is the member's entry in the member list of its data's incarnation.
func (m *opModel) entry(mm *mMember) *mEtcdMember {
	if mm.data == nil {
		return nil
	}
	inc := m.incs[mm.data.inc]
	for i := range inc.members {
		if inc.members[i].id == mm.data.id {
			return &inc.members[i]
		}
	}
	return nil
}

func (m *opModel) quorate(ix int) bool {
	voters, up := 0, 0
	for _, em := range m.incs[ix].members {
		if em.learner {
			continue
		}
		voters++
		for _, mm := range m.mems {
			if m.connected(mm) && mm.data.inc == ix && mm.data.id == em.id {
				up++
				break
			}
		}
	}
	return voters > 0 && up > voters/2
}

// serving: the member's etcd answers linearizable reads (a learner's does not).
func (m *opModel) serving(mm *mMember) bool {
	e := m.entry(mm)
	return m.connected(mm) && e != nil && !e.learner && m.quorate(mm.data.inc)
}

// current is the incarnation that serves (-1: none).
func (m *opModel) current() int {
	for ix, inc := range m.incs {
		if !inc.superseded && m.quorate(ix) {
			return ix
		}
	}
	return -1
}

// answers is what the reconciler finds when it asks the members directly: whether each
// member pod's etcd answers a linearizable read.
func (m *opModel) answers() map[string]bool {
	out := map[string]bool{}
	for _, mm := range m.mems {
		if mm.pod != nil {
			out[mm.name] = m.serving(mm)
		}
	}
	return out
}

// servingBut names a member, other than but, whose etcd answers a linearizable read ("" when
// none does).
func (m *opModel) servingBut(but string) string {
	for _, mm := range m.mems {
		if mm.name != but && mm.pod != nil && m.serving(mm) {
			return mm.name
		}
	}
	return ""
}

// held is the newest write that a voter's intact data of a live incarnation, or the backup,
// holds.
func (m *opModel) held() int {
	h := max(m.backup, 0)
	for _, mm := range m.mems {
		if e := m.entry(mm); e != nil && !e.learner && !m.incs[mm.data.inc].superseded {
			h = max(h, mm.data.log)
		}
	}
	return h
}

func (m *opModel) nodeNow(mm *mMember) time.Time { return m.now.Add(mm.skew) }
func (m *opModel) opNow() time.Time              { return m.now.Add(m.opSkew) }

// --- the API server's copy, and the operator's cache of it ---

func (m *opModel) snapshot() {
	m.snapshots++
	a := mAPI{seq: m.snapshots, ec: m.ec.DeepCopy(), stsReplicas: m.stsReplicas, stsVersion: m.stsVersion, configMembers: m.configMembers, configFenced: m.configFenced,
		pods: map[string]mPod{}, leases: map[string]coordinationv1.Lease{}, reports: map[string]cluster.Report{}, acks: map[string]cluster.DirectiveAck{}}
	a.ec.ResourceVersion = strconv.Itoa(m.ecVersion)
	for _, mm := range m.mems {
		if mm.pod != nil {
			a.pods[mm.name] = *mm.pod
		}
		if mm.ordinal < m.memberObjects() {
			l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: mm.name, UID: types.UID(strconv.Itoa(mm.leaseUID))},
				Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr(int32(modelLeaseTTL / time.Second))}}
			if mm.holder != "" {
				l.Spec.HolderIdentity, l.Spec.RenewTime = ptr(mm.holder), &metav1.MicroTime{Time: mm.renewTime}
			}
			a.leases[mm.name] = l
			if mm.report != nil {
				a.reports[mm.name] = *mm.report
			}
			if mm.ack != nil {
				a.acks[mm.name] = *mm.ack
			}
		}
	}
	m.history = append(m.history, a)
	if len(m.history) > 8 {
		m.history = m.history[1:]
	}
}

// memberObjects is how many members' Leases and EtcdMembers exist (the operator makes one
// per member it may run).
func (m *opModel) memberObjects() int {
	n := max(int(m.stsReplicas), int(m.ec.Spec.Replicas), int(m.ec.Status.ClusterSize))
	if h := m.ec.Status.Hibernation; h != nil {
		n = max(n, int(h.Replicas))
	}
	return min(n, modelMaxMembers)
}

// cached is the operator's view: the newest copy, or, while the cache lags, an older one,
// never older than the last it read (an informer's cache does not go back in time).
func (m *opModel) cached() mAPI {
	latest := m.history[len(m.history)-1]
	if !m.cacheLags {
		m.cacheSeq = latest.seq
		return latest
	}
	oldest := m.history[0].seq
	from := max(m.cacheSeq, oldest)
	m.cacheSeq = from + m.rng.Intn(latest.seq-from+1)
	return m.history[m.cacheSeq-oldest]
}

// --- the operator ---

// observe builds the Observation from the cached copy as the reconciler's observe does.
func (m *opModel) observe(a mAPI, now time.Time) Observation {
	ec := a.ec
	o := Observation{Now: now, Name: ec.Name, Desired: ec.Spec.Replicas, Previous: ec.Status, Graces: modelGraces,
		StatefulSetReplicas: a.stsReplicas, ConfigMembers: a.configMembers, Hibernate: ec.Annotations[v1alpha1.AnnotationHibernate] == "true",
		FenceRequest: FencedMembers(ec)}
	members := map[int]*MemberObservation{}
	at := func(i int) *MemberObservation {
		if mo, ok := members[i]; ok {
			return mo
		}
		mo := &MemberObservation{Name: fmt.Sprintf("c-%d", i), Ordinal: i}
		members[i] = mo
		return mo
	}
	known := max(a.stsReplicas, 0)
	if h := ec.Status.Hibernation; h != nil {
		known = max(known, h.Replicas)
	}
	for i := 0; i < int(known); i++ {
		at(i)
	}
	for i := 0; i < modelMaxMembers; i++ {
		name := fmt.Sprintf("c-%d", i)
		if p, ok := a.pods[name]; ok {
			at(i).Pod = &PodState{Ready: p.ready, Created: p.created, Deleting: p.deleting}
		}
		if l, ok := a.leases[name]; ok {
			at(i).Lease = leaseState(&l, m.leases.observe(&l, now))
		}
	}
	for _, i := range slices.Sorted(func(yield func(int) bool) {
		for i := range members {
			if !yield(i) {
				return
			}
		}
	}) {
		o.Members = append(o.Members, *members[i])
	}
	// The reconciler reads the claims, their volumes' nodes fresh, while volumeObserved.
	for i := range o.Members {
		if mm := m.member(o.Members[i].Name); mm != nil && mm.outOfService && volumeObserved(o, mm.name) {
			o.Members[i].Volume = &VolumeState{Claim: "data-" + mm.name, UID: strconv.Itoa(mm.claim), NodeLost: "its node is marked out of service"}
		}
	}
	o.Reports = a.reports
	rec := Recovery{Acks: a.acks, Policy: v1alpha1.QuorumLossAutomatic, Timing: modelTiming,
		Backup: heal.Backup{Configured: m.backup >= 0, Revision: int64(max(m.backup, 0))}}
	if ec.Status.Recovery != nil {
		st, err := decodeRecovery(ec.Status.Recovery.Raw)
		if err != nil {
			m.failf("status.recovery cannot be read: %v", err)
		}
		rec.Status = st
	}
	o.Recovery = &rec
	o.Formed = ec.Status.ClusterID != "" || slices.ContainsFunc(ec.Status.Members, func(s v1alpha1.MemberStatus) bool { return s.ID != "" }) ||
		slices.ContainsFunc(o.Members, func(mo MemberObservation) bool { return mo.Lease != nil && mo.Lease.Holder != "" })
	return o
}

// write is one of the operator's writes: it fails while the API server refuses them at random.
func (m *opModel) write(what string) bool {
	if m.apiFlaky && m.rng.Intn(2) == 0 {
		m.logf("operator: writing %s fails", what)
		return false
	}
	return true
}

// reconcile is one pass of the reconciler: observe (from the cache), Decide, probe the
// quorum before a fence for a lost quorum, sync the StatefulSet and the ConfigMap, delete the
// pods of case 9, fence (only a stored directive), write the status (unless the write fails
// or conflicts with a newer object).
func (m *opModel) reconcile() {
	a := m.cached()
	now := m.opNow()
	o := m.observe(a, now)
	d := Decide(o)
	if d.AskMembers {
		o.Answers = m.answers()
		d = Decide(o)
	}
	if slices.Contains(d.Cases, CaseScaleDown) && d.StatefulSetReplicas < o.StatefulSetReplicas {
		o.DirectReports = m.directReports()
		d = Decide(o)
	}
	m.logf("operator (cache %d behind): %v sts %d config %d delete %v", m.history[len(m.history)-1].seq-a.seq, d.Cases, d.StatefulSetReplicas, d.ConfigMembers, d.DeletePods)
	if d.StatefulSetReplicas == 0 && o.StatefulSetReplicas > 0 && a.ec.ResourceVersion != strconv.Itoa(m.ecVersion) {
		return // staleForStop
	}
	if d.StatefulSetReplicas != a.stsReplicas && a.stsVersion == m.stsVersion && m.write("the StatefulSet") {
		m.stsReplicas, m.stsVersion = d.StatefulSetReplicas, m.stsVersion+1
	}
	configSynced := d.ConfigMembers == a.configMembers && slices.Equal(d.Fenced, a.configFenced)
	if !configSynced && m.write("the ConfigMap") {
		m.configMembers, m.configFenced, configSynced = d.ConfigMembers, d.Fenced, true
	}
	if configSynced {
		// As the reconciler's stopFenced: once the ConfigMap carries the fence, the annotation
		// read fresh still naming the member, the pod read fresh still Ready.
		for _, name := range d.StopFenced {
			if slices.Contains(FencedMembers(m.ec), name) {
				m.deletePod(name, "stop the fenced member", func(p *mPod) bool { return p.ready })
			}
		}
	}
	for _, v := range d.ReplaceVolumes {
		m.replaceVolume(v)
	}
	notReadySince := now.Add(-modelGraces.NotReady)
	for _, name := range d.DeletePods {
		m.deletePod(name, "restart (case 9)", func(p *mPod) bool { return !p.ready && p.created.Before(notReadySince) })
	}
	if rec := d.Recovery; rec != nil && len(rec.FencePods) > 0 {
		m.fence(*rec)
	}
	status := (&ClusterReconciler{}).status(a.ec, o, d)
	if rec := d.Recovery; rec != nil {
		raw, err := encodeRecovery(rec.Status)
		if err != nil {
			m.failf("encoding status.recovery: %v", err)
			return
		}
		status.Recovery = &runtime.RawExtension{Raw: raw}
		if rec.Event != "" {
			m.logf("operator event: %s", rec.Event)
		}
	}
	status.Hibernation = roundHibernation(d.Hibernation.Status)
	status.ObservedGeneration = a.ec.Status.ObservedGeneration
	switch {
	case a.ec.ResourceVersion != strconv.Itoa(m.ecVersion):
		m.logf("operator: status write conflicts (the cache is behind: %s, stored %d)", a.ec.ResourceVersion, m.ecVersion)
	case m.write("the status"):
		m.storeStatus(status)
	}
}

func (m *opModel) storeStatus(s v1alpha1.EtcdClusterStatus) {
	if s.Recovery != nil {
		st, _ := decodeRecovery(s.Recovery.Raw)
		if st.LastEpoch < m.lastEpoch {
			m.failf("the stored epoch went back from %d to %d", m.lastEpoch, st.LastEpoch)
		}
		m.lastEpoch = max(m.lastEpoch, st.LastEpoch)
	}
	m.ec.Status = s
	m.ecVersion++
}

// storedDirective is the directive as the API server holds it.
func (m *opModel) storedDirective() *cluster.Directive {
	if m.ec.Status.Recovery == nil {
		return nil
	}
	st, _ := decodeRecovery(m.ec.Status.Recovery.Raw)
	return st.Directive
}

// fence deletes the pods the directive fences, as the reconciler's fence does: only once the
// directive is stored (read fresh), each pod read fresh and deleted only if it is older than
// the directive.
func (m *opModel) fence(rec recoveryOutcome) {
	dir := rec.Status.Directive
	if s := m.storedDirective(); s == nil || s.Epoch != dir.Epoch || !s.IssuedAt.Equal(dir.IssuedAt) {
		return
	}
	for _, name := range rec.FencePods {
		m.deletePod(name, fmt.Sprintf("fence (directive %d)", dir.Epoch), func(p *mPod) bool { return !p.created.After(dir.IssuedAt) })
		if m.violation != "" {
			return
		}
	}
}

// deletePod deletes a member pod, read fresh, while still holds, and checks the properties
// of every deletion.
func (m *opModel) deletePod(name, why string, still func(*mPod) bool) {
	var mm *mMember
	for _, x := range m.mems {
		if x.name == name {
			mm = x
		}
	}
	if mm == nil {
		m.failf("the operator deletes pod %s, which is not one of the cluster's", name)
		return
	}
	p := mm.pod
	if p == nil || p.deleting || !still(p) {
		return
	}
	if !m.write("the deletion of pod " + name) {
		return
	}
	if strings.HasPrefix(why, "restart") || strings.HasPrefix(why, "stop the fenced") {
		// Only another member answering proves the quorum serves: a member NotReady because
		// the quorum is lost is not restarted, and a fence never stops the last that serve.
		if m.servingBut(name) == "" {
			m.failf("pod %s deleted (%s) while no other member answers a linearizable read", name, why)
		}
	}
	if strings.HasPrefix(why, "fence") {
		dir := m.storedDirective()
		if dir != nil && dir.Restore == nil {
			if ans := m.servingBut(""); ans != "" {
				m.failf("pod %s is fenced for directive %d while the quorum answers a linearizable read (%s serves)", name, dir.Epoch, ans)
			}
		}
		if dir != nil && p.created.After(dir.IssuedAt.Add(-m.opSkew)) {
			m.failf("pod %s (uid %d), created %s after directive %d was issued, is fenced: a directive is carried out once",
				name, p.uid, p.created.Sub(dir.IssuedAt.Add(-m.opSkew)), dir.Epoch)
		}
		if e, ok := m.fenced[p.uid]; ok {
			m.failf("pod %s (uid %d) fenced twice (directives %d and %d)", name, p.uid, e, dir.Epoch)
		}
		m.fenced[p.uid] = dir.Epoch
	}
	m.logf("operator deletes pod %s (uid %d): %s", name, p.uid, why)
	m.removePod(mm)
}

// member is the member named name (nil: none).
func (m *opModel) member(name string) *mMember {
	for _, mm := range m.mems {
		if mm.name == name {
			return mm
		}
	}
	return nil
}

// replaceVolume is the operator deleting a member's claim (its UID as precondition), then its
// pod: the member comes back on a new, empty volume on a node that runs.
func (m *opModel) replaceVolume(v volumeReplacement) {
	mm := m.member(v.Member)
	if mm == nil || strconv.Itoa(mm.claim) != v.UID {
		return // another claim since: the precondition fails
	}
	if !mm.outOfService {
		m.failf("the claim of %s is replaced while its node is not known to be off", mm.name)
	}
	switch ans := m.servingBut(mm.name); {
	case v.Recovery:
		// The recovery waits for the member's log, which is lost with its node: replaced only
		// while no quorum serves, or the loss would be of a member a quorum could do without.
		for ix := range m.incs {
			if m.quorate(ix) {
				m.failf("the claim of %s is replaced for a recovery while incarnation %d has a quorum", mm.name, ix)
			}
		}
	case ans == "":
		m.failf("the claim of %s is replaced while no other member answers a linearizable read", mm.name)
	}
	if !m.write("the deletion of claim data-" + mm.name) {
		return
	}
	m.logf("operator replaces the claim of %s (claim %d)", mm.name, mm.claim)
	mm.claim++
	mm.data, mm.etcd, mm.pod = nil, false, nil
	mm.nodeLost, mm.outOfService = false, false
}

// removePod is a deletion: done at once, or pending while the node is lost.
func (m *opModel) removePod(mm *mMember) {
	if mm.nodeLost {
		mm.pod.deleting = true
		return
	}
	mm.pod, mm.etcd = nil, false
}

// --- Kubernetes' controllers ---

// statefulSet is the StatefulSet controller (parallel pod management): a pod for each
// ordinal below replicas, none above.
func (m *opModel) statefulSet() {
	for _, mm := range m.mems {
		switch {
		case mm.ordinal < int(m.stsReplicas) && mm.pod == nil:
			mm.pod = &mPod{uid: m.uid(), created: m.now}
			m.logf("statefulset creates pod %s (uid %d)", mm.name, mm.pod.uid)
		case mm.ordinal >= int(m.stsReplicas) && mm.pod != nil && !mm.pod.deleting:
			m.removePod(mm)
		}
	}
}

// kubelets set each pod's readiness from its probe (etcd's linearizable read); the node
// controller sets the pods of a lost node NotReady. A kubelet back in touch finishes the
// deletions pending on its node.
func (m *opModel) kubelets() {
	for _, mm := range m.mems {
		if mm.pod == nil {
			continue
		}
		if mm.nodeLost {
			mm.pod.ready = false
			continue
		}
		if mm.pod.deleting {
			mm.pod, mm.etcd = nil, false
			continue
		}
		mm.pod.ready = m.serving(mm)
	}
}

// --- the sidecars ---

// sidecar is member mm's sidecar deciding how its etcd starts (when it does not run), from
// the directive as stored.
func (m *opModel) sidecar(mm *mMember) {
	if mm.pod == nil || mm.pod.deleting || mm.nodeLost || mm.etcd {
		return
	}
	d := m.storedDirective()
	var names []string
	for i := 0; i < max(int(m.configMembers), int(m.stsReplicas)); i++ {
		names = append(names, fmt.Sprintf("c-%d", i))
	}
	// As member.Decide: a directive that asks something of this member (one it has not
	// carried out, or the seed's restart on what it recovered) comes before its fence.
	followsDirective := d != nil && (mm.data == nil || mm.data.epoch < d.Epoch || d.Phase == cluster.PhaseSeeding && d.Seed == mm.name)
	switch {
	case d != nil && slices.Contains(d.Fenced(names), mm.name):
		return // held
	case !followsDirective && slices.Contains(m.configFenced, mm.name):
		return // held by the user's fence
	case d != nil && d.Phase == cluster.PhaseSeeding && d.Seed == mm.name && (mm.data == nil || mm.data.epoch < d.Epoch):
		m.seed(mm, d)
		return
	}
	if e := m.entry(mm); e != nil && !m.incs[mm.data.inc].superseded {
		mm.etcd = true
		m.logf("%s starts etcd on its data", mm.name)
		return
	}
	// No data of a live cluster (wiped, or of a superseded incarnation, or removed): join
	// the serving cluster as a learner, replacing its old entry, if the ConfigMap lists it.
	cur := m.current()
	if cur < 0 || mm.ordinal >= int(m.configMembers) {
		return
	}
	inc := m.incs[cur]
	inc.members = slices.DeleteFunc(inc.members, func(e mEtcdMember) bool { return e.name == mm.name })
	id := m.newID()
	inc.members = append(inc.members, mEtcdMember{id: id, name: mm.name, learner: true})
	epoch := int64(0)
	if mm.data != nil {
		epoch = mm.data.epoch
	}
	if d != nil {
		epoch = max(epoch, d.Epoch)
	}
	mm.data, mm.etcd = &mData{inc: cur, id: id, log: inc.history, epoch: epoch}, true
	m.logf("%s joins cluster %s as learner %s", mm.name, inc.clusterID, id)
	m.membershipChanged()
}

// seed carries out the directive's recovery alone, checking its invariants as it happens.
func (m *opModel) seed(mm *mMember, d *cluster.Directive) {
	for _, o := range m.mems {
		// A member removed from its cluster's list counts no more: it can join no quorum.
		if o != mm && o.etcd && m.entry(o) != nil && !m.incs[o.data.inc].superseded {
			m.failf("%s recovers (directive %d) while %s's etcd still runs", mm.name, d.Epoch, o.name)
			return
		}
	}
	var inc *mInc
	switch d.Mode {
	case cluster.RecoverFromSurvivor:
		e := m.entry(mm)
		if e == nil || e.learner || m.incs[mm.data.inc].superseded {
			m.logf("%s cannot seed: no voter data of its own", mm.name)
			return
		}
		old := m.incs[mm.data.inc]
		inc = &mInc{clusterID: old.clusterID, term: old.term + 1, history: mm.data.log}
	case cluster.RecoverFromBackup:
		if m.backup <= 0 {
			m.failf("%s restores directive %d from a backup that holds nothing", mm.name, d.Epoch)
			return
		}
		inc = &mInc{clusterID: m.newID(), term: 1, history: m.backup}
		mm.data = &mData{id: m.newID()}
	default:
		m.failf("directive %d has mode %q", d.Epoch, d.Mode)
		return
	}
	if inc.history < m.mustKeep {
		m.failf("%s recovers (%s) with writes up to %d: acknowledged writes %d..%d are lost while a voter's data or the backup held them",
			mm.name, d.Mode, inc.history, inc.history+1, m.mustKeep)
	}
	for _, o := range m.incs {
		o.superseded = true
	}
	inc.members = []mEtcdMember{{id: mm.data.id, name: mm.name}}
	m.incs = append(m.incs, inc)
	mm.data.inc, mm.data.log, mm.data.epoch, mm.etcd = len(m.incs)-1, inc.history, d.Epoch, true
	r := cluster.DirectiveResult{Member: mm.name, MemberID: mm.data.id, ClusterID: inc.clusterID, Revision: int64(inc.history), At: m.nodeNow(mm)}
	if !mm.reportFrozen {
		mm.ack = &cluster.DirectiveAck{Epoch: d.Epoch, Result: r}
	}
	m.logf("%s recovers alone (%s): cluster %s at write %d", mm.name, d.Mode, inc.clusterID, inc.history)
}

// promote: a learner's sidecar promotes it once it caught up (it needs the quorum).
func (m *opModel) promote(mm *mMember) {
	if e := m.entry(mm); e != nil && e.learner && m.connected(mm) && m.quorate(mm.data.inc) {
		e.learner = false
		m.logf("%s promoted", mm.name)
		m.membershipChanged()
	}
}

// leaderSidecar removes the members the ConfigMap no longer lists from etcd (the leader's
// sidecar, scaling down).
func (m *opModel) leaderSidecar() {
	cur := m.current()
	if cur < 0 {
		return
	}
	inc := m.incs[cur]
	for _, e := range inc.members {
		if ord, err := strconv.Atoi(strings.TrimPrefix(e.name, "c-")); err == nil && ord >= int(m.configMembers) && len(inc.members) > 1 {
			inc.members = slices.DeleteFunc(inc.members, func(x mEtcdMember) bool { return x.id == e.id })
			m.logf("the leader removes %s from etcd", e.name)
			m.membershipChanged()
			return
		}
	}
}

// membershipChanged: a sidecar writes its report at once when the member list changes (it
// is part of what makes a report new); the figures follow every modelRenew.
func (m *opModel) membershipChanged() {
	m.check()
	for _, mm := range m.mems {
		mm.lastReport = time.Time{}
	}
	m.sidecarReports()
}

// sidecarReports: every sidecar that can reach the API server rewrites its report (from etcd
// or from its disk) and, while its etcd serves, renews its Lease, every modelRenew.
func (m *opModel) sidecarReports() {
	leader := m.leader()
	for _, mm := range m.mems {
		if mm.pod == nil || mm.pod.deleting || mm.nodeLost || m.now.Sub(mm.lastReport) < modelRenew {
			continue
		}
		mm.lastReport = m.now
		r := m.reportOf(mm, leader == mm.name)
		if !mm.reportFrozen {
			mm.report = &r
		}
		holder := ""
		if r.Serving && r.MemberID != "" {
			role := v1alpha1.RoleMember
			switch {
			case r.Learner:
				role = v1alpha1.RoleLearner
			case r.Leader:
				role = v1alpha1.RoleLeader
			}
			holder = r.MemberID + ":" + role
		}
		if holder != "" && !mm.leaseFrozen {
			mm.holder, mm.renewTime = holder, m.nodeNow(mm)
		}
	}
}

// leader is the member the model's sidecars report as leading: the first serving voter.
func (m *opModel) leader() string {
	for _, mm := range m.mems {
		if e := m.entry(mm); m.serving(mm) && !e.learner {
			return mm.name
		}
	}
	return ""
}

// directReports are the reports the reconciler gets by asking the sidecars directly: every
// sidecar whose pod runs on a reachable node answers with what it sees now, whether or not
// its EtcdMember writes are refused.
func (m *opModel) directReports() map[string]cluster.Report {
	leader := m.leader()
	out := map[string]cluster.Report{}
	for _, mm := range m.mems {
		if mm.pod != nil && !mm.pod.deleting && !mm.nodeLost {
			out[mm.name] = m.reportOf(mm, leader == mm.name)
		}
	}
	return out
}

func (m *opModel) reportOf(mm *mMember, leader bool) cluster.Report {
	r := cluster.Report{Name: mm.name, At: m.nodeNow(mm), DataEmpty: mm.data == nil, Owner: mm.name}
	if mm.data == nil {
		r.Source = cluster.ReportFromDisk
		return r
	}
	inc := m.incs[mm.data.inc]
	var members []cluster.LiveMember
	for _, e := range inc.members {
		members = append(members, cluster.LiveMember{ID: e.id, Name: e.name, IsLearner: e.learner})
	}
	e := m.entry(mm)
	r.DataValid, r.MemberID, r.ClusterID, r.Formed, r.Members = true, mm.data.id, inc.clusterID, true, members
	r.Term, r.LastTerm, r.LastIndex, r.Commit, r.Applied, r.Revision = inc.term, inc.term, uint64(mm.data.log), uint64(mm.data.log), uint64(mm.data.log), int64(mm.data.log)
	r.AppliedEpoch, r.Learner = mm.data.epoch, e != nil && e.learner
	r.Source = cluster.ReportFromDisk
	if m.connected(mm) && e != nil && m.quorate(mm.data.inc) {
		r.Source, r.Serving, r.Leader = cluster.ReportFromEtcd, true, leader
	}
	return r
}

// --- faults and load ---

func (m *opModel) writeData() {
	ix := m.current()
	if ix < 0 {
		return
	}
	m.incs[ix].history++
	m.mustKeep = m.incs[ix].history
	m.catchUp()
}

// catchUp: the running members of a quorate incarnation hold every write.
func (m *opModel) catchUp() {
	for _, mm := range m.mems {
		if m.connected(mm) && m.entry(mm) != nil && m.quorate(mm.data.inc) {
			mm.data.log = m.incs[mm.data.inc].history
		}
	}
}

func (m *opModel) flushBackup() {
	if ix := m.current(); ix >= 0 && m.backup >= 0 {
		m.backup = m.incs[ix].history
	}
}

// setSpec changes the EtcdCluster's spec or annotations (a new resourceVersion).
func (m *opModel) setSpec(f func(ec *v1alpha1.EtcdCluster)) {
	f(m.ec)
	m.ecVersion++
}

// unfence lifts every fence the annotation asks for.
func (m *opModel) unfence() {
	m.setSpec(func(ec *v1alpha1.EtcdCluster) { delete(ec.Annotations, v1alpha1.AnnotationFencedMembers) })
}

// check verifies what holds in every state.
func (m *opModel) check() {
	var serving []string
	for ix, inc := range m.incs {
		if m.quorate(ix) {
			serving = append(serving, inc.clusterID)
			if inc.superseded {
				m.failf("second cluster: superseded incarnation %d (cluster %s) has a quorum again", ix, inc.clusterID)
			}
		}
	}
	if len(serving) > 1 {
		m.failf("two clusters serve: %s", strings.Join(serving, ", "))
	}
	// A member removed from its incarnation's list is told so, and its etcd exits.
	for _, mm := range m.mems {
		if mm.etcd && !mm.nodeLost && m.entry(mm) == nil {
			mm.etcd = false
		}
	}
	m.catchUp()
	m.mustKeep = min(m.mustKeep, m.held())
}

// action runs one named action, which takes a second, checks the invariants, and lets the
// API server's state be seen.
func (m *opModel) action(name string, f func()) {
	m.trace = append(m.trace, fmt.Sprintf("%s %s", m.now.Format("15:04:05"), name))
	f()
	m.now = m.now.Add(time.Second)
	m.check()
	m.snapshot()
}

// round is the system's own steps, each once: the controllers, the sidecars, the operator.
func (m *opModel) round() {
	m.action("statefulset", m.statefulSet)
	for _, mm := range m.mems {
		m.action("sidecar "+mm.name, func() { m.sidecar(mm); m.promote(mm) })
	}
	m.action("leader sidecar", m.leaderSidecar)
	m.action("kubelets", m.kubelets)
	m.action("reports", m.sidecarReports)
	m.action("reconcile", m.reconcile)
}

// calmDown ends every fault but the clocks' skews, and resumes a hibernated cluster.
func (m *opModel) calmDown() {
	m.trace = append(m.trace, "--- no more faults ---")
	m.cacheLags, m.apiFlaky = false, false
	for _, mm := range m.mems {
		mm.nodeLost, mm.outOfService, mm.leaseFrozen, mm.reportFrozen = false, false, false, false
	}
	if m.ec.Spec.Replicas == 0 || m.ec.Annotations[v1alpha1.AnnotationHibernate] == "true" {
		m.setSpec(func(ec *v1alpha1.EtcdCluster) {
			if h := ec.Status.Hibernation; ec.Spec.Replicas == 0 && h != nil {
				ec.Spec.Replicas = h.Replicas
			} else if ec.Spec.Replicas == 0 {
				ec.Spec.Replicas = 3
			}
			delete(ec.Annotations, v1alpha1.AnnotationHibernate)
		})
	}
}

// healthy: no directive, every desired member a serving voter of the one serving cluster,
// its pod Ready and its status Ready.
func (m *opModel) healthy() bool {
	ix := m.current()
	if ix < 0 || m.storedDirective() != nil || m.stsReplicas != m.ec.Spec.Replicas || m.ec.Status.ClusterSize != m.ec.Spec.Replicas {
		return false
	}
	for _, mm := range m.mems {
		if mm.ordinal >= int(m.ec.Spec.Replicas) {
			continue
		}
		if mm.pod == nil || !mm.pod.ready || !m.serving(mm) || mm.data.inc != ix {
			return false
		}
	}
	for _, s := range m.ec.Status.Members {
		if s.Status != v1alpha1.MemberReady {
			return false
		}
	}
	return len(m.ec.Status.Members) == int(m.ec.Spec.Replicas)
}

// recoverable: a voter of a live incarnation holds data, or the backup does.
func (m *opModel) recoverable() bool {
	if m.backup > 0 {
		return true
	}
	for _, mm := range m.mems {
		if e := m.entry(mm); e != nil && !e.learner && !m.incs[mm.data.inc].superseded {
			return true
		}
	}
	return false
}

// randomAction picks the next action of a generated sequence: mostly the system's own steps,
// with faults among them.
func (m *opModel) randomAction() {
	mm := m.mems[m.rng.Intn(int(max(m.stsReplicas, m.ec.Spec.Replicas, 1)))]
	switch k := m.rng.Intn(100); {
	case k < 8:
		m.action("statefulset", m.statefulSet)
	case k < 20:
		m.action("sidecar "+mm.name, func() { m.sidecar(mm); m.promote(mm) })
	case k < 23:
		m.action("leader sidecar", m.leaderSidecar)
	case k < 31:
		m.action("kubelets", m.kubelets)
	case k < 41:
		m.action("reports", m.sidecarReports)
	case k < 55:
		m.action("reconcile", m.reconcile)
	case k < 59:
		m.action("write", m.writeData)
	case k < 61:
		m.action("flush backup", m.flushBackup)
	case k < 65:
		m.action("wait 10s", func() { m.now = m.now.Add(10 * time.Second) })
	case k < 68:
		m.action("kill etcd "+mm.name, func() { mm.etcd = false })
	case k < 70:
		m.action("wipe "+mm.name, func() { mm.etcd, mm.data = false, nil })
	case k < 73:
		m.action("node of "+mm.name+" lost", func() { mm.nodeLost = true })
	case k < 75:
		m.action("node of "+mm.name+" back", func() { mm.nodeLost, mm.outOfService = false, false })
	case k < 76:
		// Marked out of service, the lost node is off for good: Kubernetes deletes its pod by
		// force, and its etcd is down; the pod it makes again cannot run there.
		m.action("node of "+mm.name+" marked out of service", func() {
			if mm.nodeLost {
				mm.outOfService, mm.etcd = true, false
				if mm.pod != nil {
					mm.pod = nil
				}
			}
		})
	case k < 78:
		m.action("Lease writes of "+mm.name+" refused", func() { mm.leaseFrozen = true })
	case k < 79:
		m.action("Lease writes of "+mm.name+" accepted", func() { mm.leaseFrozen = false })
	case k < 81:
		m.action("EtcdMember writes of "+mm.name+" refused", func() { mm.reportFrozen = true })
	case k < 82:
		m.action("EtcdMember writes of "+mm.name+" accepted", func() { mm.reportFrozen = false })
	case k < 84:
		m.action("operator's cache lags", func() { m.cacheLags = !m.cacheLags })
	case k < 86:
		m.action("operator's writes fail", func() { m.apiFlaky = !m.apiFlaky })
	case k < 88:
		m.action("operator restarts", func() { m.leases, m.cacheLags = &leaseClock{}, false })
	case k < 89:
		skew := time.Duration(m.rng.Intn(121)-60) * time.Second
		m.action(fmt.Sprintf("the clock of %s's node is off by %s", mm.name, skew), func() { mm.skew = skew })
	case k < 90:
		// The operator reads the API server's clock from its answers' Date (apiClock): what
		// is left of its own clock's error is under a second.
		skew := time.Duration(m.rng.Intn(2001)-1000) * time.Millisecond
		m.action(fmt.Sprintf("the operator's reading of the API server's clock is off by %s", skew), func() { m.opSkew = skew })
	case k < 94:
		n := int32(1 + m.rng.Intn(modelMaxMembers))
		m.action(fmt.Sprintf("scale to %d", n), func() { m.setSpec(func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = n }) })
	case k < 95:
		m.action("scale to 0 (hibernate)", func() { m.setSpec(func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = 0 }) })
	case k < 97:
		m.action("fence "+mm.name, func() {
			m.setSpec(func(ec *v1alpha1.EtcdCluster) { ec.Annotations[v1alpha1.AnnotationFencedMembers] = mm.name })
		})
	case k < 98:
		m.action("unfence", m.unfence)
	default:
		m.action("run a round", m.round)
	}
}

func (m *opModel) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "api: sts %d config %d desired %d hibernate %q; stored directive %+v\n", m.stsReplicas, m.configMembers, m.ec.Spec.Replicas,
		m.ec.Annotations[v1alpha1.AnnotationHibernate], m.storedDirective())
	if r := m.ec.Status.Recovery; r != nil {
		fmt.Fprintf(&b, "status.recovery: %s\n", r.Raw)
	}
	for _, s := range m.ec.Status.Members {
		fmt.Fprintf(&b, "status member %s: %s (%s) since %s\n", s.Name, s.Status, s.Reason, s.LastTransitionTime.Format("15:04:05"))
	}
	for ix, inc := range m.incs {
		fmt.Fprintf(&b, "incarnation %d: cluster %s history %d superseded %t quorate %t members %+v\n", ix, inc.clusterID, inc.history, inc.superseded, m.quorate(ix), inc.members)
	}
	for _, mm := range m.mems {
		fmt.Fprintf(&b, "%s: pod %+v etcd %t data %+v nodeLost %t skew %s frozen lease %t report %t holder %q renewed %s\n", mm.name, mm.pod, mm.etcd, mm.data,
			mm.nodeLost, mm.skew, mm.leaseFrozen, mm.reportFrozen, mm.holder, mm.renewTime.Format("15:04:05"))
	}
	fmt.Fprintf(&b, "backup %d, must keep %d, operator skew %s\n", m.backup, m.mustKeep, m.opSkew)
	tail := m.trace
	if keep := 200; len(tail) > keep && os.Getenv("STEWARD_MODEL_FULL_TRACE") == "" {
		tail = tail[len(tail)-keep:]
	}
	return b.String() + strings.Join(tail, "\n")
}

// runOpSequence lets a healthy cluster settle, runs a generated sequence of faults among the
// system's steps, then lets the system run without faults: it must be healthy again (or,
// with every copy of the data gone, say what it waits for), with every property kept.
func runOpSequence(t *testing.T, seed int64, size int) {
	m := newOpModel(seed, size)
	for i := 0; i < 3; i++ {
		m.round()
	}
	if !m.healthy() || m.violation != "" {
		t.Fatalf("seed %d: a formed %d-member cluster is not healthy at rest: %s\n%s", seed, size, m.violation, m.dump())
	}
	for i := 0; i < 5; i++ {
		m.action("write", m.writeData)
	}
	m.flushBackup()
	steps := 40 + m.rng.Intn(160)
	for i := 0; i < steps && m.violation == ""; i++ {
		m.randomAction()
	}
	m.calmDown()
	if fence := m.ec.Annotations[v1alpha1.AnnotationFencedMembers]; fence != "" {
		// The fence stays asked for: a recovery in force must end all the same (it suspends
		// the fence, and the fenced member does its part), and the fence must hold again after.
		fenced := m.mems[slices.IndexFunc(m.mems, func(mm *mMember) bool { return mm.name == fence })]
		// A fence applies to a member of three or more (one fenced leaves a quorum of the others).
		held := func() bool {
			return fenced.ordinal >= int(m.stsReplicas) || m.stsReplicas < 3 ||
				slices.Contains(m.ec.Status.FencedMembers, fence) && fenced.pod != nil && !fenced.etcd
		}
		ended := false
		for r := 0; r < 60 && m.violation == "" && !(ended && held()); r++ {
			m.round()
			m.action("wait 10s", func() { m.now = m.now.Add(10 * time.Second) })
			ended = m.storedDirective() == nil
		}
		switch {
		case m.violation != "" || !m.recoverable():
		case !ended:
			t.Fatalf("seed %d (%d members): with %s fenced, the recovery never ended\n%s", seed, size, fence, m.dump())
		case !held():
			t.Fatalf("seed %d (%d members): once the recovery ended, %s's fence did not hold again\n%s", seed, size, fence, m.dump())
		}
		m.action("unfence", m.unfence)
	}
	ok := false
	for r := 0; r < 60 && m.violation == "" && !ok; r++ {
		m.round()
		m.action("write", m.writeData)
		m.action("wait 10s", func() { m.now = m.now.Add(10 * time.Second) })
		ok = m.healthy()
	}
	switch {
	case m.violation != "":
		t.Fatalf("seed %d (%d members): %s\n%s", seed, size, m.violation, m.dump())
	case !ok && m.recoverable():
		t.Fatalf("seed %d (%d members): no progress: the cluster never became healthy with no more faults\n%s", seed, size, m.dump())
	case !ok && (m.ec.Status.Recovery == nil || !strings.Contains(string(m.ec.Status.Recovery.Raw), `"waiting"`)):
		t.Fatalf("seed %d (%d members): every copy is gone, and the status does not say what it waits for\n%s", seed, size, m.dump())
	}
}

func opSequences(def int) int {
	if *modelSequences > 0 {
		return *modelSequences
	}
	if v, err := strconv.Atoi(os.Getenv("STEWARD_MODEL_SEQUENCES")); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return def / 10
	}
	return def
}

// TestModelOperatorGeneratedFaults explores seeded orders of etcd killed, volumes wiped,
// nodes lost (pods stuck Terminating, etcd cut off) and back, Lease and EtcdMember writes
// refused, the operator's cache lagging, its writes failing, its restarts (its lease clock
// lost), clocks skewed on nodes (up to a minute) and the operator's reading of the API
// server's clock off by up to a second (apiClock), scale requests and hibernation, a member
// fenced and unfenced (a recovery must end while the fence is asked for), writes and backups.
func TestModelOperatorGeneratedFaults(t *testing.T) {
	t.Parallel() // pure: nothing shared
	exploreOperator(t)
}

func exploreOperator(t *testing.T) {
	for _, tc := range []struct{ size, sequences int }{{3, 1000}, {5, 300}} {
		t.Run(fmt.Sprintf("%d members", tc.size), func(t *testing.T) {
			if seed, err := strconv.ParseInt(os.Getenv("STEWARD_MODEL_SEED"), 10, 64); err == nil {
				runOpSequence(t, seed, tc.size) // one failing sequence again, as printed
				return
			}
			n := opSequences(tc.sequences)
			for seed := int64(1); seed <= int64(n); seed++ {
				runOpSequence(t, seed*7919+int64(tc.size), tc.size)
			}
		})
	}
}
