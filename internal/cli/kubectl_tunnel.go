package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// tunnel opens a connection to port of the pod named pod in the verb's namespace.
type tunnel func(ctx context.Context, pod string, port int) (net.Conn, error)

// portForward is the plugin's tunnel: a port-forward through the API server (as kubectl
// port-forward, with the user's own rights: pods/portforward), one stream per connection and
// no local listener, so nothing on this machine but the plugin reaches the member. The kubelet
// connects inside the pod, so the cluster's NetworkPolicy, which keeps other pods from the
// members' ports, does not stand in the way.
func portForward(cfg *rest.Config, core kubernetes.Interface, ns string) tunnel {
	return func(ctx context.Context, pod string, port int) (net.Conn, error) {
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			return nil, err
		}
		url := core.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
		conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url).Dial(portforward.PortForwardProtocolV1Name)
		if err != nil {
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", ns, pod, err)
		}
		h := http.Header{}
		h.Set(corev1.PortHeader, strconv.Itoa(port))
		h.Set(corev1.PortForwardRequestIDHeader, "0")
		h.Set(corev1.StreamType, corev1.StreamTypeError)
		errs, err := conn.CreateStream(h)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", ns, pod, err)
		}
		errs.Close() // the kubelet only writes on it
		h.Set(corev1.StreamType, corev1.StreamTypeData)
		data, err := conn.CreateStream(h)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", ns, pod, err)
		}
		c := &streamConn{ReadWriter: data, close: conn.Close, addr: tunnelAddr(fmt.Sprintf("%s/%s:%d", ns, pod, port))}
		go func() {
			// The kubelet reports a failed connection inside the pod (nothing listens) here.
			if msg, _ := io.ReadAll(errs); len(msg) > 0 {
				c.Close()
			}
		}()
		return c, nil
	}
}

// streamConn is a port-forward's data stream as a net.Conn. Deadlines are not supported
// (gRPC and TLS do without them; a stalled connection ends with its context).
type streamConn struct {
	io.ReadWriter
	close func() error
	once  sync.Once
	addr  net.Addr
}

func (c *streamConn) Close() error {
	var err error
	c.once.Do(func() { err = c.close() })
	return err
}
func (c *streamConn) LocalAddr() net.Addr              { return c.addr }
func (c *streamConn) RemoteAddr() net.Addr             { return c.addr }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

type tunnelAddr string

func (a tunnelAddr) Network() string { return "portforward" }
func (a tunnelAddr) String() string  { return string(a) }
