package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what the clients of the HTTP server can take of the daemon: a client that
// never sends, sends slowly or keeps connections open holds one of MaxConns connections for
// at most ReadTimeout or IdleTimeout, and the daemon's own work (lock nodes, runs' pipes)
// keeps the rest of its file descriptors.
type Limits struct {
	ReadTimeout time.Duration // a whole request, body included (--http-read-timeout)
	IdleTimeout time.Duration // a kept-alive connection between requests (--http-idle-timeout)
	MaxConns    int           // connections served at once; more wait to be accepted (--http-max-conns)
}

const (
	// httpHeaderTimeout bounds the reading of a request's header (at most ReadTimeout).
	httpHeaderTimeout = 5 * time.Second
	// httpWriteTimeout bounds the writing of a response.
	httpWriteTimeout = 30 * time.Second
	// maxBodyBytes bounds the body of every POST: a form with a token and a pause reason.
	maxBodyBytes = 8 << 10
	// maxReasonBytes bounds a pause reason, stored on every node and shown on every page.
	maxReasonBytes = 1 << 10
	// PageCache is how long a read of the nodes serves the status page and the metrics.
	PageCache = time.Second
	// snapshotTimeout bounds a read of the nodes for the page or the metrics.
	snapshotTimeout = httpWriteTimeout / 2
)

// contentSecurityPolicy lets the pages load nothing, run no script, post forms only to the
// daemon, and be framed by no one.
const contentSecurityPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// NewServer returns the daemon's HTTP server for h, within lim; its own errors go to log.
func NewServer(addr string, h http.Handler, lim Limits, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: min(httpHeaderTimeout, lim.ReadTimeout),
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn),
	}
}

// Listen listens on the server's address, for at most max connections at once. When the
// address is not a loopback one it warns; when it is, it wraps the server's handler in
// sameHost (requests that name another host are refused: DNS rebinding).
func Listen(srv *http.Server, max int, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return nil, err
	}
	if loopbackAddr(ln.Addr()) {
		srv.Handler = sameHost(srv.Handler)
	} else {
		log.Warn("http: the server listens beyond loopback: anyone who reaches it reads the jobs' schedules and outcomes, and the token travels in clear text; put it behind a TLS reverse proxy (see docs/security.md)",
			"addr", ln.Addr().String())
	}
	return newLimitListener(ln, max), nil
}

// loopbackAddr reports whether a listener's address is on loopback only.
func loopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// sameHost refuses (421) the requests whose Host is not a loopback address or "localhost": a
// page of another site that resolves its name to 127.0.0.1 (DNS rebinding) reads nothing.
func sameHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "the server listens on loopback: use http://127.0.0.1:PORT or http://localhost:PORT", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guard sets the security headers of every response and bounds every POST's body: at most
// maxBodyBytes, and a URL-encoded form or nothing (415 otherwise: no multipart, no temp file).
func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method == http.MethodPost {
			if ct := r.Header.Get("Content-Type"); ct != "" {
				if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/x-www-form-urlencoded" {
					http.Error(w, "send a form as application/x-www-form-urlencoded (or no body)", http.StatusUnsupportedMediaType)
					return
				}
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// formError writes the status of an error of r.ParseForm: 413 for a body over the limit.
func formError(w http.ResponseWriter, err error) {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		http.Error(w, fmt.Sprintf("the body is over %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
		return
	}
	http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
}

// limitListener accepts at most max connections at once: Accept waits while max are open.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	close sync.Once
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

func (l *limitListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// cachedResponse serves h's response to a plain GET of path, made at most once per PageCache
// however many clients ask: the metrics' gauges read every job's state from the nodes.
func cachedResponse(path string, h http.Handler) http.Handler {
	s := &snapshot[*recorded]{ttl: PageCache, read: func(ctx context.Context) *recorded {
		rec := &recorded{header: http.Header{}, code: http.StatusOK}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		if err != nil { // a constant path: never
			rec.code = http.StatusInternalServerError
			return rec
		}
		h.ServeHTTP(rec, req)
		return rec
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := s.get(r.Context())
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(rec.body)
	})
}

// recorded is a response kept to be served again.
type recorded struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorded) Header() http.Header  { return r.header }
func (r *recorded) WriteHeader(code int) { r.code = code }
func (r *recorded) Write(p []byte) (int, error) {
	r.body = append(r.body, p...)
	return len(p), nil
}

// snapshot is a value read at most once per ttl however many ask for it: the first caller
// reads it, and the callers meanwhile wait for that read and share it. It is safe for
// concurrent use.
type snapshot[T any] struct {
	ttl  time.Duration
	read func(context.Context) T

	mu  sync.Mutex
	at  time.Time
	val T
}

// get returns the value, read again if it is older than ttl. The read is bounded by
// snapshotTimeout, not by ctx: a client that goes away does not spoil the value the others
// share.
func (s *snapshot[T]) get(ctx context.Context) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || time.Since(s.at) >= s.ttl {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
		s.val = s.read(ctx)
		cancel()
		s.at = time.Now()
	}
	return s.val
}

// reset makes the next get read the value again: after a change the reader should see.
func (s *snapshot[T]) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = time.Time{}
}
