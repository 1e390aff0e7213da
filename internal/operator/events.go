package operator

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
)

// maxEventNote is the longest note the API server takes in an Event (events.k8s.io/v1): a
// longer one is refused, and the Event is lost.
const maxEventNote = 1024

// eventRecorder is the operator's Event recorder: a note longer than the API server takes (a
// store's error quoted in full, say) is cut to fit and marked as cut, rather than refused.
func eventRecorder(mgr ctrl.Manager) events.EventRecorder {
	return noteLimit{mgr.GetEventRecorder("steward-operator")}
}

type noteLimit struct{ events.EventRecorder }

func (r noteLimit) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", fitNote(fmt.Sprintf(note, args...)))
}

// fitNote cuts s to at most maxEventNote bytes, on a character's boundary, saying it was cut.
func fitNote(s string) string {
	if len(s) <= maxEventNote {
		return s
	}
	const cut = " [cut]"
	s = s[:maxEventNote-len(cut)]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + cut
}
