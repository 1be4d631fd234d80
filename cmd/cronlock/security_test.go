//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
	"github.com/cronlock/cronlock/internal/redistest"
)

// do sends req and returns the status, the body and the header of the response.
func do(t *testing.T, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func newRequest(t *testing.T, method, url, token string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// --http :PORT listens on loopback, as http: ":PORT" does; an address beyond loopback is
// warned about.
func TestHTTPFlagBind(t *testing.T) {
	const job = "  - {name: j, schedule: '@yearly', command: ['true']}\n"
	d := startDaemon(t, "", job, "--http", ":0")
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+$`, d.base)
	assert.NotContains(t, d.log.String(), "listens beyond loopback")

	d = startDaemon(t, "", job, "--http", "0.0.0.0:0")
	assert.Contains(t, d.log.String(), `level=WARN msg="http: the server listens beyond loopback`)
}

// A job's command sees neither the HTTP token nor a node's password, and env: cannot hand
// them over.
func TestJobEnvironWithoutSecrets(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "tok-s3cret")
	t.Setenv("CRONLOCK_TEST_NODE_PW", "pw-s3cret")
	nodes := redistest.StartN(t, 3, redistest.Config{Args: []string{"--user", "cl", "on", ">pw-s3cret", "~*", "&*", "+@all"}})
	endQuarantine(t, nodes...)
	var cfg strings.Builder
	cfg.WriteString("http_token_env: CRONLOCK_TEST_TOKEN\nnodes:\n")
	for _, n := range nodes {
		fmt.Fprintf(&cfg, "  - {addr: %q, username: cl, password_env: CRONLOCK_TEST_NODE_PW}\n", n.Addr())
	}
	out := filepath.Join(t.TempDir(), "env")
	jobs := fmt.Sprintf("jobs:\n  - {name: env, schedule: '@every 1s', command: [sh, -c, 'env > %s.tmp && mv %s.tmp %s']}\n", out, out, out)
	path := writeFile(t, t.TempDir(), "c.yaml", cfg.String()+jobs)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr proctest.SyncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"run", "--config", path}, io.Discard, &stderr) }()
	proctest.Eventually(t, "a run's environment", func() bool { _, err := os.Stat(out); return err == nil })
	stopInProcess(t, cancel, code, &stderr)
	env, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(env), "CRONLOCK_JOB=env")
	assert.NotContains(t, string(env), "s3cret")

	for _, ref := range []string{"CRONLOCK_TEST_TOKEN", "CRONLOCK_TEST_NODE_PW"} {
		bad := writeFile(t, t.TempDir(), "c.yaml", cfg.String()+"jobs:\n  - {name: j, schedule: '@hourly', command: ['true'], env: {X_env: "+ref+"}}\n")
		code, _, errOut := runCLI(t, "validate", "--config", bad)
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, "jobs[0].env.X_env: "+ref+" holds ")
	}
}

// Without the token, reads show schedules and outcomes, not command lines, node addresses or
// error texts; every response carries the security headers; a foreign Host is refused.
func TestUnauthenticatedReads(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\nmin_interval: 200ms\n", `  - name: fails
    schedule: "@every 200ms"
    command: ["sh", "-c", "echo --password=hunter2 >&2; exit 3"]
`)
	proctest.Eventually(t, "a failed run", func() bool {
		_, body, _ := do(t, newRequest(t, "GET", d.base+"/jobs", "", nil))
		return strings.Contains(body, `"outcome": "failed"`)
	})
	status, body, h := do(t, newRequest(t, "GET", d.base+"/jobs", "", nil))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"schedule": "@every 200ms"`)
	assert.NotContains(t, body, "hunter2")
	assert.NotContains(t, body, `"command"`)
	assert.NotContains(t, body, `"error"`)
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	_, body, _ = do(t, newRequest(t, "GET", d.base+"/jobs", "s3cret", nil))
	assert.Contains(t, body, "hunter2", "the token shows the command line")
	assert.Contains(t, body, `"error"`)

	_, body, _ = do(t, newRequest(t, "GET", d.base+"/jobs/fails/history", "", nil))
	assert.Contains(t, body, `"Outcome": "failed"`)
	assert.NotContains(t, body, "hunter2")
	_, body, _ = do(t, newRequest(t, "GET", d.base+"/jobs/fails/history", "s3cret", nil))
	assert.Contains(t, body, `"Error": "command exited with status 3: --password=hunter2"`)

	nodeAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	_, body, _ = do(t, newRequest(t, "GET", d.base+"/readyz", "", nil))
	assert.Contains(t, body, "nodes[0]: ok")
	assert.NotRegexp(t, nodeAddr, body)
	_, body, _ = do(t, newRequest(t, "GET", d.base+"/readyz", "s3cret", nil))
	assert.Regexp(t, nodeAddr, body)

	status, body, h = do(t, newRequest(t, "GET", d.base+"/", "", nil))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "failed")
	assert.NotContains(t, body, "hunter2")
	assert.Equal(t, "DENY", h.Get("X-Frame-Options"))
	assert.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))

	// DNS rebinding: a name that resolves to 127.0.0.1 but is not a loopback name.
	for _, host := range []string{"attacker.example", "attacker.example:80", "10.0.0.1"} {
		req := newRequest(t, "GET", d.base+"/jobs", "", nil)
		req.Host = host
		status, _, _ = do(t, req)
		assert.Equal(t, http.StatusMisdirectedRequest, status, host)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]:9464"} {
		req := newRequest(t, "GET", d.base+"/healthz", "", nil)
		req.Host = host
		status, _, _ = do(t, req)
		assert.Equal(t, http.StatusOK, status, host)
	}
}

// The body of a POST is bounded: a 5 MB pause reason is refused, and so is a reason over 1 KiB;
// the reason is taken from the body only; multipart is refused before its body is read, so no
// temp file is written.
func TestControlBodies(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\n", "  - {name: j, schedule: '@yearly', command: ['true']}\n")
	tmp := t.TempDir() // where the daemon's temp files go
	t.Setenv("TMPDIR", tmp)
	form := func(url, token, body string) (int, string) {
		req := newRequest(t, "POST", url, token, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		status, body, _ := do(t, req)
		return status, body
	}
	paused := func() bool {
		_, body, _ := do(t, newRequest(t, "GET", d.base+"/", "", nil))
		return strings.Contains(body, "Paused:")
	}

	status, body := form(d.base+"/jobs/j/pause", "s3cret", "reason="+strings.Repeat("x", 5<<20))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	status, body = form(d.base+"/jobs/j/pause", "", "token=s3cret&reason="+strings.Repeat("x", 5<<20))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	status, body = form(d.base+"/jobs/j/pause", "s3cret", "reason="+strings.Repeat("x", 1025))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	assert.Contains(t, body, "reason: 1025 bytes; give at most 1024")
	assert.False(t, paused(), "no reason over the limit is stored")

	status, body = form(d.base+"/jobs/j/pause?reason=from-the-query", "s3cret", "")
	require.Equal(t, http.StatusOK, status, body)
	proctest.Eventually(t, "the pause on the page", paused)
	_, page, _ := do(t, newRequest(t, "GET", d.base+"/", "", nil))
	assert.Contains(t, page, "Paused: paused over HTTP")
	assert.NotContains(t, page, "from-the-query")

	// A multipart upload without a token: refused (415) while it is still being sent.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	req := newRequest(t, "POST", d.base+"/jobs/j/resume", "", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp := make(chan int, 1)
	go func() {
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			resp <- 0
			return
		}
		r.Body.Close()
		resp <- r.StatusCode
	}()
	part, err := mw.CreateFormFile("token", "big")
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	sent := 0
	for ; sent < 64; sent++ { // 64 MiB, more than ParseMultipartForm keeps in memory
		if _, err := part.Write(chunk); err != nil {
			break
		}
	}
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, entries, "no temp file while the upload is sent")
	pw.Close()
	assert.Equal(t, http.StatusUnsupportedMediaType, <-resp)
	assert.Less(t, sent, 64, "the upload is cut off, not read")
}

// A body sent a byte at a time is cut off by --http-read-timeout.
func TestTrickledBodyCutOff(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\n", "  - {name: j, schedule: '@yearly', command: ['true']}\n",
		"--http-read-timeout", "300ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	const length = 500
	_, err = fmt.Fprintf(conn, "POST /jobs/j/pause HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\nreason=", length)
	require.NoError(t, err)
	cut := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		cut <- line
	}()
	sent := len("reason=")
	for ; sent < length; sent++ {
		select {
		case line := <-cut:
			assert.NotContains(t, line, "200", "the request was cut off, not served")
			return
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := conn.Write([]byte("x")); err != nil {
			return // the server closed the connection
		}
	}
	t.Fatalf("the whole trickled body (%d bytes, a byte per 20ms) was read: %q", length, <-cut)
}

// vmKiB reads a field of /proc/PID/status in KiB, e.g. VmRSS or VmHWM (the peak RSS).
func vmKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB`).FindStringSubmatch(string(data))
	require.NotNil(t, m, "no %s in /proc/%d/status", field, pid)
	var kib int
	_, err = fmt.Sscan(m[1], &kib)
	require.NoError(t, err)
	return kib
}

// The daemon as a process under attack: its config, its connections, its memory.
func TestDaemonUnderAttack(t *testing.T) {
	bin := buildBinary(t, t.TempDir())

	t.Run("a config others can change is refused at start, by validate and at reload", func(t *testing.T) {
		t.Parallel()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		dir := t.TempDir()
		content := nodesConfig([]*redistest.Server{node}) + "jobs:\n  - {name: j, schedule: '@every 1s', command: ['true']}\n"
		cfg := writeFile(t, dir, "c.yaml", content)
		require.NoError(t, os.Chmod(cfg, 0o666))
		want := cfg + ": config: not safe to trust: group or others can write it (mode 0666)"
		for _, cmd := range []string{"run", "validate"} {
			code, out := runBin(t, bin, nil, cmd, "--config", cfg)
			assert.Equal(t, 2, code, out)
			assert.Contains(t, out, want)
			assert.Contains(t, out, "chmod go-w "+cfg+" (for development only: --insecure-config)")
		}
		code, out := runBin(t, bin, nil, "validate", "--config", cfg, "--insecure-config")
		assert.Equal(t, 0, code, out)
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chmod(cfg, 0o644))
			require.NoError(t, os.Chown(cfg, 65534, 65534))
			code, out := runBin(t, bin, nil, "run", "--config", cfg)
			assert.Equal(t, 2, code, out)
			assert.Contains(t, out, "it is owned by uid 65534, neither root nor this daemon's user (uid 0)")
			require.NoError(t, os.Chown(cfg, 0, 0))
		}

		// Running on a trusted file: a reload of the file made writable by others is refused.
		require.NoError(t, os.Chmod(cfg, 0o600))
		p := startProc(t, bin, "daemon", nil, "run", "--config", cfg)
		p.waitLog(t, `msg="ready: taking ticks"`)
		require.NoError(t, os.WriteFile(cfg, []byte(content+"  - {name: added, schedule: '@every 1s', command: ['true']}\n"), 0o600))
		require.NoError(t, os.Chmod(cfg, 0o646))
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, `msg="reload: config refused, the running one is kept" err="`+want[:len(want)-len("(mode 0666)")]+"(mode 0646)")
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chmod(cfg, 0o600))
			require.NoError(t, os.Chown(cfg, 65534, 65534))
			p.signal(t, syscall.SIGHUP)
			p.waitLog(t, "it is owned by uid 65534")
		}
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		assert.NotContains(t, p.out.String(), "job=added")
	})

	t.Run("idle connections are closed while runs go on", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartN(t, 3, redistest.Config{})
		endQuarantine(t, nodes...)
		cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+"min_interval: 100ms\njobs:\n  - {name: tick, schedule: '@every 200ms', command: ['true']}\n")
		// 256 descriptors, hard limit included: without a cap on connections, 2,000 idle ones
		// would take them all.
		p := startProc(t, "sh", "daemon", nil, "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "run", "--config", cfg,
			"--http", "127.0.0.1:0", "--http-idle-timeout", "100ms", "--http-max-conns", "32")
		addr := p.httpAddr(t)
		p.waitLog(t, `msg="run finished"`)

		const conns = 2000
		closed := make(chan error, conns)
		for range conns {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			require.NoError(t, err)
			go func() { // the answer, then the server's close of the idle connection
				_, err := io.Copy(io.Discard, c)
				closed <- err
			}()
		}
		before := strings.Count(p.out.String(), `msg="run finished"`)
		for i := range conns {
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(proctest.WaitLimit):
				t.Fatalf("%d of %d idle connections still open after %v", conns-i, conns, proctest.WaitLimit)
			}
		}
		proctest.Eventually(t, "runs after the connections", func() bool {
			return strings.Count(p.out.String(), `msg="run finished"`) >= before+3
		})
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		assert.NotContains(t, p.out.String(), "too many open files")
		assert.NotContains(t, p.out.String(), "outcome=failed")
	})

	t.Run("large unauthenticated bodies are refused without reading them", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartN(t, 3, redistest.Config{})
		endQuarantine(t, nodes...)
		cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+"http_token_env: CRONLOCK_TEST_TOKEN\njobs:\n  - {name: j, schedule: '@yearly', command: ['true']}\n")
		p := startProc(t, bin, "daemon", []string{"CRONLOCK_TEST_TOKEN=s3cret"}, "run", "--config", cfg, "--http", "127.0.0.1:0")
		base := "http://" + p.httpAddr(t)
		status, _, _ := do(t, newRequest(t, "GET", base+"/", "", nil)) // the page's first read
		require.Equal(t, http.StatusOK, status)
		pid := p.cmd.Process.Pid
		rss := vmKiB(t, pid, "VmRSS")

		const bodies, size = 40, 10 << 20
		body := "token=x&reason=" + strings.Repeat("x", size)
		statuses := make(chan int, bodies)
		for range bodies {
			go func() {
				req, _ := http.NewRequest("POST", base+"/jobs/j/pause", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := http.DefaultClient.Do(req)
				if err != nil { // the daemon closed the connection while the body was sent
					statuses <- 0
					return
				}
				resp.Body.Close()
				statuses <- resp.StatusCode
			}()
		}
		for range bodies {
			s := <-statuses
			assert.True(t, s == 0 || s == http.StatusRequestEntityTooLarge, "status %d", s)
		}
		peak := vmKiB(t, pid, "VmHWM")
		t.Logf("RSS %d KiB before, peak %d KiB after %d bodies of %d MiB", rss, peak, bodies, size>>20)
		assert.Less(t, peak-rss, 64<<10, "the peak RSS grew by more than 64 MiB: bodies were read")
	})
}

// scripts and commands match the lines of INFO commandstats of the scripts run on the nodes
// (EVAL and EVALSHA: the reads of the jobs' state) and of every command but INFO (which
// nodeCalls sends).
var (
	scripts  = regexp.MustCompile(`(?m)^cmdstat_(eval(?:sha)?):calls=(\d+),`)
	commands = regexp.MustCompile(`(?m)^cmdstat_(\w+(?:\|\w+)?):calls=(\d+),`)
	// triggerPolls matches the command that only the script of the scheduler's poll of the
	// queue of manual runs sends (schedseam.WithTriggerPoll): one per script run.
	triggerPolls = regexp.MustCompile(`(?m)^cmdstat_(zremrangebyscore):calls=(\d+),`)
)

// nodeCalls counts the calls of the commands that match which (scripts, commands) on the nodes,
// less the calls of the commands that match less, read from the same INFO reply of each node
// (so a script counted in which and the command it sends counted in less come together).
func nodeCalls(t *testing.T, nodes []*redistest.Server, which *regexp.Regexp, less ...*regexp.Regexp) int {
	t.Helper()
	n := 0
	for _, s := range nodes {
		info, err := s.Client().Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		count := func(re *regexp.Regexp) int {
			n := 0
			for _, m := range re.FindAllStringSubmatch(info, -1) {
				if m[1] == "info" {
					continue
				}
				var c int
				_, err := fmt.Sscan(m[2], &c)
				require.NoError(t, err)
				n += c
			}
			return n
		}
		n += count(which)
		for _, re := range less {
			n -= count(re)
		}
	}
	return n
}

// settledCalls returns nodeCalls once it stopped changing for 100ms: the slowest node's answers
// to a broadcast come after the quorum's.
func settledCalls(t *testing.T, nodes []*redistest.Server, which *regexp.Regexp, less ...*regexp.Regexp) int {
	t.Helper()
	n := nodeCalls(t, nodes, which, less...)
	for {
		time.Sleep(100 * time.Millisecond)
		m := nodeCalls(t, nodes, which, less...)
		if m == n {
			return n
		}
		n = m
	}
}

// However many clients ask for the page and the metrics at once, the nodes are read at most
// once per second for each.
func TestPageAndMetricsShareOneRead(t *testing.T) {
	d := startDaemon(t, "", "  - {name: a, schedule: '@yearly', command: ['true']}\n  - {name: b, schedule: '@yearly', command: ['true']}\n")
	settled := func() int { return settledCalls(t, d.nodes, scripts) }
	for _, path := range []string{"/", "/metrics"} {
		before := settled()
		time.Sleep(web.PageCache) // the cached read, if any, is out of date
		status, _, _ := do(t, newRequest(t, "GET", d.base+path, "", nil))
		require.Equal(t, http.StatusOK, status)
		one := settled() - before
		require.Positive(t, one, "a request of %s reads the nodes", path)

		time.Sleep(web.PageCache)
		before = settled()
		const clients = 200
		start := time.Now()
		done := make(chan int, clients)
		for range clients {
			go func() {
				resp, err := http.Get(d.base + path)
				if err != nil {
					done <- 0
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done <- resp.StatusCode
			}()
		}
		for range clients {
			assert.Equal(t, http.StatusOK, <-done)
		}
		elapsed := time.Since(start)
		reads := float64(settled()-before) / float64(one)
		t.Logf("%s: %d requests in %v read the nodes %.1f times (%d scripts each)", path, clients, elapsed, reads, one)
		assert.LessOrEqual(t, reads, elapsed.Seconds()/web.PageCache.Seconds()+1, "%s: at most one read per %v", path, web.PageCache)
	}
}
