package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// sessionCookie is the name of the console's session cookie.
	sessionCookie = "cronlock_session"
	// SessionLife is how long a sign-in lasts.
	SessionLife = 12 * time.Hour
	// LoginBurst failed sign-ins are answered at once; then one per LoginEvery, per process.
	LoginBurst = 5
	LoginEvery = time.Second
)

// sessions signs and checks the console's session cookies and CSRF tokens. The signing key is
// derived from the bearer token, so every replica that has the token accepts the cookies of the
// others (one load balancer in front of several), a restart keeps the operators signed in, and
// changing the token ends every session. It is safe for concurrent use.
type sessions struct {
	key    []byte // nil: no token, no sign-in
	logins loginLimiter
}

func newSessions(token string) *sessions {
	s := &sessions{logins: loginLimiter{tokens: LoginBurst}}
	if token != "" {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("cronlock console session key v1"))
		s.key = m.Sum(nil)
	}
	return s
}

// mac is the HMAC of the parts, each ended by a NUL so that no two lists of parts collide.
func (s *sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedIn is a session: its random id, and the name the operator gave at sign-in.
type signedIn struct{ id, name string }

// issue returns the cookie of a new session of the operator name: a random id, its expiry in
// Unix seconds, the name (base64url) and their signature, "id.expiry.name.mac". Secure when r
// came over TLS, directly or to a proxy that says so.
func (s *sessions) issue(r *http.Request, now time.Time, name string) *http.Cookie {
	id := rand.Text() // 128 random bits
	exp := now.Add(SessionLife).Truncate(time.Second)
	e := strconv.FormatInt(exp.Unix(), 10)
	n := base64.RawURLEncoding.EncodeToString([]byte(name))
	return &http.Cookie{Name: sessionCookie, Value: id + "." + e + "." + n + "." + s.mac("session", id, e, name), Path: "/",
		Expires: exp, MaxAge: int(SessionLife / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)}
}

// ended returns the cookie that ends r's session in the browser.
func ended(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)}
}

// overTLS reports whether r came over TLS, to this server or to a proxy in front of it
// (X-Forwarded-Proto: https; a client that lies about it only makes its own cookie stricter).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// session returns r's session, the zero signedIn when r has none that is signed and unexpired.
func (s *sessions) session(r *http.Request, now time.Time) signedIn {
	if s.key == nil {
		return signedIn{}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return signedIn{}
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 4 {
		return signedIn{}
	}
	name, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal([]byte(parts[3]), []byte(s.mac("session", parts[0], parts[1], string(name)))) {
		return signedIn{}
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() >= exp {
		return signedIn{}
	}
	return signedIn{id: parts[0], name: string(name)}
}

// csrf returns the CSRF token of the session id: the value of every form's hidden field csrf.
func (s *sessions) csrf(id string) string { return s.mac("csrf", id) }

// csrfOK reports whether got is the CSRF token of the session id.
func (s *sessions) csrfOK(id, got string) bool {
	return id != "" && hmac.Equal([]byte(got), []byte(s.csrf(id)))
}

// tokenOK compares a token given at sign-in with the configured one, in constant time.
func tokenOK(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// loginLimiter is a bucket of failed sign-ins: LoginBurst at first, one more each LoginEvery.
// An attempt takes one before the token is compared and gives it back when the token was
// right, so an empty bucket refuses guesses without comparing them, and right tokens never
// drain it. It is per process and shared by all clients: an attacker who floods it delays
// signing in by LoginEvery at a time (Retry-After), never locks anyone out for longer than the
// flood, and never touches the bearer-token API.
type loginLimiter struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

// take takes an attempt at now; false when the bucket is empty.
func (l *loginLimiter) take(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.at.IsZero() {
		l.tokens = min(LoginBurst, l.tokens+now.Sub(l.at).Seconds()/LoginEvery.Seconds())
	}
	l.at = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// give gives an attempt back: its token was right.
func (l *loginLimiter) give() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = min(LoginBurst, l.tokens+1)
}
