package web

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
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
