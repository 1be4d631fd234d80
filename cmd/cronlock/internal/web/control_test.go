package web

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

// Without http_token_env the control endpoints are off.
func TestControlWithoutTokenIsForbidden(t *testing.T) {
	c := &control{}
	for _, token := range []string{"", "anything"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/jobs/j/pause", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		assert.False(t, c.authorized(w, r))
		assert.Equal(t, http.StatusForbidden, w.Code)
	}
}

// The login page says why sign-in is off: no http_token_env in the config, or a variable it
// names that is not set or is empty (never "set http_token_env" when it is set).
func TestLoginPageSaysWhySignInIsOff(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_EMPTY_TOKEN", "")
	for _, tc := range []struct {
		env       string
		want, not string
	}{
		{"", "Sign-in is off: set http_token_env in the config", "is not set or is empty"},
		{"CRONLOCK_TEST_EMPTY_TOKEN", "Sign-in is off: the environment variable CRONLOCK_TEST_EMPTY_TOKEN, named by http_token_env, is not set or is empty where the daemon runs", "set http_token_env in the config"},
		{"CRONLOCK_TEST_UNSET_TOKEN", "Sign-in is off: the environment variable CRONLOCK_TEST_UNSET_TOKEN, named by http_token_env, is not set or is empty where the daemon runs", "set http_token_env in the config"},
	} {
		c := &control{sessions: newSessions("")}
		c.token, c.off = token(&config.Config{HTTPTokenEnv: tc.env})
		w := httptest.NewRecorder()
		c.loginPage(w, httptest.NewRequest(http.MethodGet, "/login", nil))
		assert.Contains(t, w.Body.String(), tc.want, tc.env)
		assert.NotContains(t, w.Body.String(), tc.not, tc.env)
		w = httptest.NewRecorder()
		c.login(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		assert.Equal(t, http.StatusForbidden, w.Code)
		assert.Contains(t, w.Body.String(), "sign-in is off: "+tc.want[len("Sign-in is off: "):], tc.env)
	}
}
