package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/internal/schedseam"
)

// loginPage serves GET /login: the form that takes the token once for a session.
func (c *control) loginPage(w http.ResponseWriter, r *http.Request) {
	d := c.data(r, "sign in — cronlock")
	if !d.Controls {
		d.Error = "Sign-in is off: " + c.off + "."
	}
	render(w, http.StatusOK, "login.html", d)
}

// login serves POST /login: the form field token, compared in constant time, signs the browser
// in with a session cookie (sessions.issue) of the operator named by the field name (checked
// first: 400 for a name schedseam.CheckOperator refuses) and sends it to the overview. The
// pauses, manual runs and backfills of the session record that name. Failures are limited
// (loginLimiter): 429 with Retry-After while the bucket is empty, 401 for a wrong token.
func (c *control) login(w http.ResponseWriter, r *http.Request) {
	d := c.data(r, "sign in — cronlock")
	if !d.Controls {
		http.Error(w, "sign-in is off: "+c.off, http.StatusForbidden)
		return
	}
	if err := r.ParseForm(); err != nil {
		formError(w, err)
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if err := schedseam.CheckOperator(name); err != nil {
		d.Error, d.Name = "Your name: "+err.Error()+".", name
		render(w, http.StatusBadRequest, "login.html", d)
		return
	}
	now := time.Now()
	if !c.sessions.logins.take(now) {
		w.Header().Set("Retry-After", strconv.Itoa(int(LoginEvery/time.Second)))
		d.Error = "Too many failed sign-ins: wait a second and try again."
		render(w, http.StatusTooManyRequests, "login.html", d)
		return
	}
	if !tokenOK(r.PostForm.Get("token"), c.token) {
		d.Error = "Wrong token."
		render(w, http.StatusUnauthorized, "login.html", d)
		return
	}
	c.sessions.logins.give()
	http.SetCookie(w, c.sessions.issue(r, now, name))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout serves POST /logout (a form with the session's CSRF token): the browser forgets the
// session. The cookie stays valid until it expires wherever a copy of it was kept: change the
// token to end every session at once (docs/security.md).
func (c *control) logout(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		formError(w, err)
		return
	}
	if !c.formAuthorized(w, r) {
		return
	}
	http.SetCookie(w, ended(r))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
