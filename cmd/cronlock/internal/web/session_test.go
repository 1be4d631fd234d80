package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	c := s.issue(httptest.NewRequest(http.MethodPost, "/login", nil), now)
	id := s.session(withCookie(c.Value), now)
	require.NotEmpty(t, id)
	assert.Equal(t, id, newSessions("tok").session(withCookie(c.Value), now), "another replica with the same token")
	assert.Empty(t, newSessions("other").session(withCookie(c.Value), now), "another token")
	assert.Empty(t, newSessions("").session(withCookie(c.Value), now), "no token: no session")
	assert.Empty(t, s.session(withCookie(c.Value), now.Add(SessionLife)), "expired")
	tampered := []byte(c.Value)
	tampered[0] ^= 1
	assert.Empty(t, s.session(withCookie(string(tampered)), now))
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.False(t, c.Secure)

	assert.True(t, s.csrfOK(id, s.csrf(id)))
	assert.False(t, s.csrfOK(id, ""))
	assert.False(t, s.csrfOK("", s.csrf("")), "no session, no CSRF token")
	other := s.session(withCookie(s.issue(httptest.NewRequest(http.MethodPost, "/login", nil), now).Value), now)
	assert.False(t, s.csrfOK(id, s.csrf(other)), "the CSRF token of another session")

	r := httptest.NewRequest(http.MethodPost, "/login", nil)
	r.Header.Set("X-Forwarded-Proto", "https")
	assert.True(t, s.issue(r, now).Secure)
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
