package node

import (
	"reflect"
	"testing"
)

func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       []string
	}{
		{"plain", `-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-X`,
			[]string{"-A", "KUBE-SERVICES", "-d", "10.96.0.1/32", "-p", "tcp", "-j", "KUBE-SVC-X"}},
		{"quoted comment", `-A KUBE-SERVICES -m comment --comment "default/kubernetes:https cluster IP" -j KUBE-SVC-X`,
			[]string{"-A", "KUBE-SERVICES", "-m", "comment", "--comment", "default/kubernetes:https cluster IP", "-j", "KUBE-SVC-X"}},
		// As iptables-save prints the rules the bridge plugin adds: quotes inside the comment are escaped.
		{"escaped quotes in a comment", `-A POSTROUTING -s 10.244.0.2/32 -m comment --comment "name: \"steward-e2e\" id: \"f6e1\"" -j CNI-2aa1`,
			[]string{"-A", "POSTROUTING", "-s", "10.244.0.2/32", "-m", "comment", "--comment", `name: "steward-e2e" id: "f6e1"`, "-j", "CNI-2aa1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitRule(tc.line); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("splitRule(%s)\n got %q\nwant %q", tc.line, got, tc.want)
			}
		})
	}
}
