package restore

import "hash/maphash"

// keyState is what Replay keeps of a live key: what the next put's checks and the missing
// leases need.
type keyState struct {
	create, version, lease int64
}

// liveKeys is Replay's index of the live keys: one entry per key, named by 128 bits of two
// independently seeded hashes of the key instead of the key itself. An entry is 40 bytes
// whatever the key's length and holds no pointer, so the garbage collector never scans the
// index (it is most of what a long replay keeps: 220,000 keys took 22 MiB as a
// map[string]keyState, 11 MiB as this).
//
// Two keys share an entry only if both 64-bit hashes collide: with seeds drawn at random per
// replay, which no writer of keys can know, the chance is about n²/2¹²⁹ for n keys (below
// 10⁻²⁵ for ten million keys). Such a collision could only make a check fail (the restore
// stops with ErrEventMismatch) or give the colliding keys one lease entry.
type liveKeys struct {
	s1, s2 maphash.Seed
	m      map[keyID]keyState
}

type keyID [2]uint64

func newLiveKeys() *liveKeys {
	return &liveKeys{s1: maphash.MakeSeed(), s2: maphash.MakeSeed(), m: map[keyID]keyState{}}
}

func (l *liveKeys) id(key []byte) keyID {
	return keyID{maphash.Bytes(l.s1, key), maphash.Bytes(l.s2, key)}
}

func (l *liveKeys) set(key []byte, st keyState) { l.m[l.id(key)] = st }

func (l *liveKeys) delete(key []byte) { delete(l.m, l.id(key)) }

// leases calls f with the lease of each live key that has one.
func (l *liveKeys) leases(f func(lease int64)) {
	for _, st := range l.m {
		if st.lease != 0 {
			f(st.lease)
		}
	}
}
