// Package redisglob escapes text for the glob patterns of Redis's SCAN MATCH, so that a job
// or prefix named "a*" matches its own keys only. It is the one owner of that escaping for
// cronlock's packages.
package redisglob

import "strings"

// Escape escapes the characters that SCAN MATCH patterns treat specially.
func Escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
