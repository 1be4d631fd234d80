package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// dialTimeout bounds connecting to the target for one client connection.
	dialTimeout = 5 * time.Second
	// readSize is the largest chunk read from one side at a time.
	readSize = 32 << 10
	// queueLen is how many chunks may wait for delivery per direction
	// before the proxy stops reading from the sender (at most 2MiB).
	queueLen = 64
)

// Proxy forwards TCP connections from Addr to a target address and injects
// faults into them. All methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close; aborts pending dials
	cancel context.CancelFunc

	latency atomic.Int64 // one-way delay as a time.Duration
	refuse  atomic.Bool

	mu        sync.Mutex
	blackhole bool
	closed    bool
	links     map[*link]struct{}

	wg sync.WaitGroup // the accept loop and every link's run
}

// New starts a proxy listening on a free 127.0.0.1 port that forwards every
// connection to target (host:port). The target is dialled once per accepted
// connection; it does not have to be up when New is called.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening for %s: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Start is New for tests: it fails tb if the proxy cannot be started and
// registers Close with tb.Cleanup.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return p
}

// Addr returns the "127.0.0.1:PORT" address clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes by d in each direction, one way:
// a chunk read from the client is written to the target d later, and a
// chunk read from the target is written to the client d later. A
// request/response round trip (such as a Redis command) therefore takes at
// least 2*d longer; to add 20ms per round trip, pass 10ms.
//
// The delay is measured from when the proxy reads the bytes, so it does not
// limit throughput: bytes keep being read while earlier ones wait, and a
// pipeline of requests all arrive about d late rather than one d after
// another. Byte order is always preserved; a new latency applies to bytes
// read after the call. Zero or negative d means no delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(max(d, 0)))
}

// Blackhole turns a blackhole on or off. While on, bytes in both directions
// are silently dropped (FINs too) on every connection, open or newly
// accepted: connections stay open and nothing is answered, so clients see
// timeouts. Connections accepted while it is on are not forwarded to the
// target at all. Turning it off resets (RST) every connection that was open
// while it was on, because their byte streams have holes; connections made
// afterwards work normally. Bytes the proxy is writing at the very moment
// Blackhole(true) is called may still get through.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	links := p.snapshotLocked()
	p.mu.Unlock()
	for _, l := range links {
		if on {
			l.dead.Store(true)
		} else if l.dead.Load() {
			l.abort(true)
		}
	}
}

// ResetAll abruptly closes every open connection, on both the client and
// the target side, with a TCP RST (SO_LINGER 0). Clients see "connection
// reset by peer" (or EOF) on their next read or write. New connections
// work normally.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.snapshotLocked()
	p.mu.Unlock()
	for _, l := range links {
		l.abort(true)
	}
}

// RefuseNew makes the proxy reset every new connection at once (while on)
// as if nothing listened on the port. Since the port stays bound, the
// kernel still completes the TCP handshake: a client's dial may succeed, but
// its first read or write fails with "connection reset by peer" or EOF
// rather than the dial failing with "connection refused". Open connections
// are not affected.
func (p *Proxy) RefuseNew(on bool) {
	p.refuse.Store(on)
}

// Close stops accepting connections, closes every open connection and waits
// for all of the proxy's goroutines to finish. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.snapshotLocked()
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	for _, l := range links {
		l.abort(false)
	}
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: closing listener %s: %w", p.Addr(), err)
	}
	return nil
}

func (p *Proxy) snapshotLocked() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: back off briefly.
			t := time.NewTimer(5 * time.Millisecond)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		client := c.(*net.TCPConn)
		if p.refuse.Load() {
			reset(client)
			continue
		}
		l := &link{p: p, client: client, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			reset(client)
			return
		}
		l.dead.Store(p.blackhole)
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// reset closes c with an RST instead of a FIN.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// link is one client connection and its connection to the target.
type link struct {
	p      *Proxy
	client *net.TCPConn
	dead   atomic.Bool   // blackholed: drop all bytes
	done   chan struct{} // closed by abort

	mu      sync.Mutex
	server  *net.TCPConn // set once dialled
	aborted bool
	once    sync.Once
}

// chunk is a piece of the byte stream and when it may be delivered.
type chunk struct {
	data []byte
	due  time.Time
}

// abort closes both connections (with RST if rst) and stops the link's
// goroutines. Only the first call has an effect.
func (l *link) abort(rst bool) {
	l.once.Do(func() {
		l.mu.Lock()
		l.aborted = true
		server := l.server
		l.mu.Unlock()
		close(l.done)
		for _, c := range []*net.TCPConn{l.client, server} {
			if c == nil {
				continue
			}
			if rst {
				reset(c)
			} else {
				_ = c.Close()
			}
		}
	})
}

// run serves the link until both directions have ended or it is aborted.
func (l *link) run() {
	defer l.p.wg.Done()
	defer l.p.forget(l)
	defer l.abort(false)

	if l.dead.Load() {
		// Accepted inside a blackhole: swallow whatever the client sends
		// until the link is reset.
		_, _ = io.Copy(io.Discard, l.client)
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(l.p.ctx, "tcp", l.p.target)
	if err != nil {
		l.abort(true) // the target is down: the client sees a reset
		return
	}
	server := c.(*net.TCPConn)
	l.mu.Lock()
	if l.aborted {
		l.mu.Unlock()
		reset(server)
		return
	}
	l.server = server
	l.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { l.pipe(server, l.client) })
	l.pipe(l.client, server)
	wg.Wait()
}

// pipe forwards src to dst: it reads src and queues the bytes with their
// due time, while a second goroutine delivers them to dst in order.
func (l *link) pipe(src, dst *net.TCPConn) {
	q := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	wg.Go(func() { l.deliver(q, dst) })
	l.receive(src, q)
	wg.Wait()
}

// receive reads src into q until EOF (then closes q) or an error (then
// aborts the link).
func (l *link) receive(src *net.TCPConn, q chan<- chunk) {
	buf := make([]byte, readSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.dead.Load() {
			c := chunk{
				data: bytes.Clone(buf[:n]),
				due:  time.Now().Add(time.Duration(l.p.latency.Load())),
			}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				close(q)
			} else {
				l.abort(true) // pass a reset on to the other side
			}
			return
		}
	}
}

// deliver writes the chunks from q to dst, each no earlier than its due
// time. When q is closed (EOF from the sender) it half-closes dst.
func (l *link) deliver(q <-chan chunk, dst *net.TCPConn) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
		case <-l.done:
			return
		}
		if !ok {
			if !l.dead.Load() {
				_ = dst.CloseWrite()
			}
			return
		}
		if wait := time.Until(c.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if l.dead.Load() {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			l.abort(true)
			return
		}
	}
}
