package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// safety bounds a wait that should end by itself, so that a broken proxy
// fails the test instead of hanging it. It is never a timing assertion.
const safety = 10 * time.Second

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// client returns a go-redis client for addr that honours context deadlines
// and does not retry, closed at the end of the test.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func ping(c *redis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// dial opens a raw connection to addr, closed at the end of the test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// rawPing sends an inline PING on c and checks for +PONG. A successful
// round trip also proves that the proxy has registered the connection.
func rawPing(t *testing.T, c net.Conn) {
	t.Helper()
	must(t, c.SetDeadline(time.Now().Add(safety)))
	_, err := io.WriteString(c, "PING\r\n")
	must(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	must(t, err)
	if line != "+PONG\r\n" {
		t.Fatalf("PING answered %q", line)
	}
}

// startEcho starts a TCP server that echoes every connection back and
// half-closes it after EOF. Cleanup closes it and waits for its goroutines.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestPassThroughRedis(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	c := client(t, p.Addr())
	ctx := context.Background()
	key := redistest.Key(t)

	big := strings.Repeat("0123456789abcdef", 1<<16) // 1MiB, many chunks
	must(t, c.Set(ctx, key, big, 0).Err())
	got, err := c.Get(ctx, key).Result()
	must(t, err)
	if got != big {
		t.Fatalf("GET through the proxy returned %d bytes, want the %d written", len(got), len(big))
	}
}

func TestPassThroughEchoWithHalfClose(t *testing.T) {
	p := Start(t, startEcho(t))
	p.SetLatency(2 * time.Millisecond)
	c := dial(t, p.Addr())
	must(t, c.SetDeadline(time.Now().Add(safety)))

	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		if _, werr = c.Write(data); werr == nil {
			werr = c.(*net.TCPConn).CloseWrite()
		}
	})
	got, err := io.ReadAll(c) // ends when the echo's FIN comes back
	wg.Wait()
	must(t, werr)
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatalf("echo through the proxy: got %d bytes, want the same %d bytes in order", len(got), len(data))
	}
}

func TestTargetRestartAndDown(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	c := client(t, p.Addr())
	must(t, ping(c, safety))

	must(t, s.Kill())
	if err := ping(c, safety); err == nil {
		t.Fatal("PING through the proxy succeeded while the target was down")
	} else if isTimeout(err) {
		t.Fatalf("PING with the target down: got a timeout, want a quick error: %v", err)
	}

	must(t, s.Restart()) // same address: the next connection reaches it
	must(t, ping(c, safety))
}

func TestLatencyAddsToRoundTrip(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	c := client(t, p.Addr())
	must(t, ping(c, safety)) // connect and handshake before measuring

	const d = 25 * time.Millisecond
	p.SetLatency(d)
	for range 3 {
		start := time.Now()
		must(t, ping(c, safety))
		if rtt := time.Since(start); rtt < 2*d {
			t.Errorf("PING round trip with one-way latency %v took %v, want at least %v", d, rtt, 2*d)
		}
	}
}

// TestLatencyDoesNotSerializeConnections holds one connection's bytes for an
// hour and checks that another connection still gets through.
func TestLatencyDoesNotSerializeConnections(t *testing.T) {
	p := Start(t, startEcho(t))
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	must(t, a.SetDeadline(time.Now().Add(safety)))
	must(t, b.SetDeadline(time.Now().Add(safety)))
	// Make sure both connections are established through the proxy.
	for _, c := range []net.Conn{a, b} {
		_, err := c.Write([]byte("x"))
		must(t, err)
		_, err = io.ReadFull(c, make([]byte, 1))
		must(t, err)
	}

	p.SetLatency(time.Hour)
	_, err := a.Write([]byte("stuck"))
	must(t, err)
	p.SetLatency(0)
	// a's bytes were read before the change and stay queued for an hour;
	// b must not wait behind them.
	_, err = b.Write([]byte("free"))
	must(t, err)
	buf := make([]byte, 4)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatalf("second connection blocked behind a delayed one: %v", err)
	}
	if string(buf) != "free" {
		t.Fatalf("echo = %q, want free", buf)
	}
}

func TestBlackhole(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	c := client(t, p.Addr())
	must(t, ping(c, safety))

	p.Blackhole(true)
	if err := ping(c, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on an open connection in a blackhole: err = %v, want a timeout", err)
	}
	fresh := client(t, p.Addr())
	if err := ping(fresh, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on a new connection in a blackhole: err = %v, want a timeout", err)
	}

	p.Blackhole(false)
	must(t, ping(c, safety)) // go-redis dropped the timed-out connection and dials anew
	must(t, ping(fresh, safety))
	must(t, ping(client(t, p.Addr()), safety))
}

func TestBlackholeThenResetOnTurningOff(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	conn := dial(t, p.Addr())
	rawPing(t, conn)

	p.Blackhole(true)
	_, err := io.WriteString(conn, "PING\r\n")
	must(t, err)
	p.Blackhole(false)
	// The dropped PING is never answered; the connection is reset instead.
	must(t, conn.SetReadDeadline(time.Now().Add(safety)))
	n, err := conn.Read(make([]byte, 16))
	if n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read on a connection that was blackholed: n=%d err=%v, want a reset", n, err)
	}
}

func TestResetAll(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	conn := dial(t, p.Addr())
	rawPing(t, conn)

	// A blocking command is in flight when the proxy resets everything.
	_, err := io.WriteString(conn, "BLPOP "+redistest.Key(t)+" 0\r\n")
	must(t, err)
	p.ResetAll()
	must(t, conn.SetReadDeadline(time.Now().Add(safety)))
	_, err = conn.Read(make([]byte, 16))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("in-flight read after ResetAll: err = %v, want connection reset", err)
	}

	c := client(t, p.Addr())
	must(t, ping(c, safety)) // new connections work
}

func TestRefuseNew(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := Start(t, s.Addr())
	open := dial(t, p.Addr())
	rawPing(t, open)

	p.RefuseNew(true)
	err := ping(client(t, p.Addr()), safety)
	if err == nil || isTimeout(err) {
		t.Fatalf("PING on a new connection while refusing: err = %v, want a quick connection error", err)
	}
	rawPing(t, open) // existing connections are not affected

	p.RefuseNew(false)
	must(t, ping(client(t, p.Addr()), safety))
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	before := goleak.IgnoreCurrent()

	p, err := New(s.Addr())
	must(t, err)
	idle := dial(t, p.Addr())
	rawPing(t, idle)
	delayed := dial(t, p.Addr())
	rawPing(t, delayed)
	holed := dial(t, p.Addr())
	rawPing(t, holed)

	p.SetLatency(time.Hour)
	_, err = io.WriteString(delayed, "PING\r\n") // queued for an hour
	must(t, err)
	p.SetLatency(0)
	p.Blackhole(true)
	deadBorn := dial(t, p.Addr()) // accepted inside the blackhole
	_, err = io.WriteString(deadBorn, "PING\r\n")
	must(t, err)
	_, err = io.WriteString(holed, "PING\r\n")
	must(t, err)

	must(t, p.Close())
	goleak.VerifyNone(t, before)
	must(t, p.Close()) // idempotent

	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("the proxy still accepts connections after Close")
	}
	// Open connections were closed.
	for name, c := range map[string]net.Conn{"idle": idle, "delayed": delayed, "blackholed": holed} {
		must(t, c.SetReadDeadline(time.Now().Add(safety)))
		if _, err := io.ReadAll(c); isTimeout(err) {
			t.Errorf("%s connection still open after Close", name)
		}
	}
}
