package fakecloud_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestSlowClientsAreCutOff: a request whose headers or body trickle in is cut off by the server's timeouts
// instead of holding a connection open.
func TestSlowClientsAreCutOff(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	srv := fakecloud.NewHTTPServer(env.Server.Handler, fakecloud.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	body := "Action=DescribeVolumes&Version=2016-11-15"
	cases := map[string]struct{ head, trickle string }{
		"body":    {fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n", len(body)), body},
		"headers": {"POST / HTTP/1.1\r\n", "Host: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, tc.head); err != nil {
				t.Fatal(err)
			}
			// One byte every 100 ms: never idle long enough for a per-read timeout, never done.
			cut := false
			for i := 0; i < len(tc.trickle) && time.Since(start) < 10*time.Second; i++ {
				if _, err := conn.Write([]byte{tc.trickle[i]}); err != nil {
					cut = true
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !cut {
				// The server may have answered (408/400) and closed; reading shows it.
				_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				raw, err := io.ReadAll(conn)
				cut = err == nil || len(raw) > 0
				if len(raw) > 0 && !isTimeoutReply(raw) {
					t.Errorf("slow request was served: %q", raw)
				}
			}
			if elapsed := time.Since(start); !cut || elapsed > 5*time.Second {
				t.Errorf("slow %s held the connection for %v (cut off: %v)", name, elapsed, cut)
			}
		})
	}
}

// isTimeoutReply reports a reply Go's server sends when it gives up on reading a request.
func isTimeoutReply(raw []byte) bool {
	s := string(raw)
	return len(s) > 12 && (s[9:12] == fmt.Sprint(http.StatusRequestTimeout) || s[9:12] == fmt.Sprint(http.StatusBadRequest))
}
