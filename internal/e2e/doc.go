// Package e2e holds end-to-end tests that need more than Redis: today, the tracing test
// against a real Jaeger (jaeger_test.go). It has no code of its own.
//
// The Jaeger test runs when CRONLOCK_JAEGER names a Jaeger v2 binary; scripts/jaeger.sh
// builds one (from tools/jaeger, a module of its own) into a cache directory and prints its
// path, and .ci/run sets the variable. Without it, the test is skipped with a message that
// says so.
package e2e
