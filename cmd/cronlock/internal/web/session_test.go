package web

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

// Unit tests of the cookie's signature and the limiter's arithmetic, pure logic: the browser
// tests (cmd/cronlock) sign in against a real daemon.

func withCookie(value string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: value})
	return r
}

// A session is valid until it expires, on every replica with the same token, and on none
// with another token; a changed byte spoils it.
func TestSessionCookie(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := newSessions("tok")
	c := s.issue(httptest.NewRequest(http.MethodPost, "/login", nil), now, "Ada L.")
	id := s.session(withCookie(c.Value), now)
	require.NotEmpty(t, id.id)
	assert.Equal(t, "Ada L.", id.name, "the session carries the name given at sign-in")
	assert.Equal(t, id, newSessions("tok").session(withCookie(c.Value), now), "another replica with the same token")
	assert.Empty(t, newSessions("other").session(withCookie(c.Value), now), "another token")
	assert.Empty(t, newSessions("").session(withCookie(c.Value), now), "no token: no session")
	assert.Empty(t, s.session(withCookie(c.Value), now.Add(SessionLife)), "expired")
	tampered := []byte(c.Value)
	tampered[0] ^= 1
	assert.Empty(t, s.session(withCookie(string(tampered)), now))
	parts := strings.Split(c.Value, ".")
	parts[2] = base64.RawURLEncoding.EncodeToString([]byte("root"))
	assert.Empty(t, s.session(withCookie(strings.Join(parts, ".")), now), "another name under the same signature")
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.False(t, c.Secure)

	assert.True(t, s.csrfOK(id.id, s.csrf(id.id)))
	assert.False(t, s.csrfOK(id.id, ""))
	assert.False(t, s.csrfOK("", s.csrf("")), "no session, no CSRF token")
	other := s.session(withCookie(s.issue(httptest.NewRequest(http.MethodPost, "/login", nil), now, "bob").Value), now)
	assert.False(t, s.csrfOK(id.id, s.csrf(other.id)), "the CSRF token of another session")

	r := httptest.NewRequest(http.MethodPost, "/login", nil)
	r.Header.Set("X-Forwarded-Proto", "https")
	assert.True(t, s.issue(r, now, "bob").Secure)
}

// The limiter answers LoginBurst failures at once, then one per LoginEvery; right tokens give
// their attempt back.
func TestLoginLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := loginLimiter{tokens: LoginBurst}
	for range LoginBurst {
		require.True(t, l.take(now))
	}
	require.False(t, l.take(now))
	require.False(t, l.take(now.Add(LoginEvery/2)))
	require.True(t, l.take(now.Add(LoginEvery)))
	require.False(t, l.take(now.Add(LoginEvery)))
	l.give()
	require.True(t, l.take(now.Add(LoginEvery)))
}

// form returns a console form's POST to path, with the cookies given.
func form(path, body string, cookies ...*http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		r.AddCookie(c)
	}
	return r
}

// Sign-in, CSRF and sign-out through the handlers, without a scheduler (none of them reads
// the nodes): a wrong token gets 401 and no cookie, the right one a session cookie; a form
// with that session acts only with its CSRF token (403 without it or with another), a form
// without a session gets 401 like the API without the bearer token; after LoginBurst wrong
// tokens even the right one waits (429); no response holds the token.
func TestLoginAndCSRF(t *testing.T) {
	const token = "s3cret-token"
	c := &control{cfg: &config.Config{}, replica: "r1", token: token, sessions: newSessions(token)}
	serve := func(h http.HandlerFunc, r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h(w, r)
		assert.NotContains(t, w.Body.String(), token)
		return w
	}

	w := serve(c.loginPage, httptest.NewRequest(http.MethodGet, "/login", nil))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `name="token"`)
	assert.Contains(t, w.Body.String(), `name="name"`)
	w = serve(c.login, form("/login", "name=ada&token=wrong"))
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Empty(t, w.Result().Cookies())
	for _, bad := range []string{"token=" + token, "name=+&token=" + token, "name=a%0Ab&token=" + token, "name=" + strings.Repeat("x", 65) + "&token=" + token} {
		w = serve(c.login, form("/login", bad))
		assert.Equal(t, http.StatusBadRequest, w.Code, bad)
		assert.Contains(t, w.Body.String(), "Your name: scheduler: operator name", bad)
		assert.Empty(t, w.Result().Cookies(), bad)
	}

	w = serve(c.login, form("/login", "name=ada&token="+token))
	require.Equal(t, http.StatusSeeOther, w.Code)
	cookies := w.Result().Cookies()
	require.Len(t, cookies, 1)
	session := cookies[0]
	assert.True(t, session.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, session.SameSite)
	assert.False(t, session.Secure, "plain HTTP")
	assert.Equal(t, int(SessionLife/time.Second), session.MaxAge)
	behindTLS := form("/login", "name=ada&token="+token)
	behindTLS.Header.Set("X-Forwarded-Proto", "https")
	assert.True(t, serve(c.login, behindTLS).Result().Cookies()[0].Secure, "behind a TLS proxy")

	si := c.sessions.session(form("/", "", session), time.Now())
	require.Equal(t, "ada", si.name)
	csrf := c.sessions.csrf(si.id)
	check := func(r *http.Request) int {
		w := httptest.NewRecorder()
		require.NoError(t, r.ParseForm())
		if c.formAuthorized(w, r) {
			return http.StatusOK
		}
		return w.Code
	}
	assert.Equal(t, http.StatusOK, check(form("/jobs/j/trigger", "csrf="+csrf, session)))
	assert.Equal(t, http.StatusForbidden, check(form("/jobs/j/trigger", "", session)), "no CSRF token")
	assert.Equal(t, http.StatusForbidden, check(form("/jobs/j/trigger", "csrf=x"+csrf, session)), "another CSRF token")
	assert.Equal(t, http.StatusUnauthorized, check(form("/jobs/j/trigger", "csrf="+csrf)), "no session")
	d := c.data(form("/", "", session), "x")
	assert.True(t, d.SignedIn)
	assert.Equal(t, csrf, d.CSRF, "the pages' forms carry the session's CSRF token")
	assert.Equal(t, "ada", d.Name, "the pages show who is signed in")

	w = serve(c.logout, form("/logout", "", session))
	assert.Equal(t, http.StatusForbidden, w.Code, "sign-out is a form like the others")
	w = serve(c.logout, form("/logout", "csrf="+csrf, session))
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Len(t, w.Result().Cookies(), 1)
	assert.Negative(t, w.Result().Cookies()[0].MaxAge, "the browser forgets the session")

	for range LoginBurst - 1 { // one wrong token was spent above
		assert.Equal(t, http.StatusUnauthorized, serve(c.login, form("/login", "name=ada&token=wrong")).Code)
	}
	w = serve(c.login, form("/login", "name=ada&token="+token))
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "the bucket is empty")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
}
