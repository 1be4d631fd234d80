package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/cronlock/cronlock/internal/tickmath"
)

// fieldBounds are the values each field of a 6-field spec takes (robfig/cron's bounds).
var fieldBounds = [][2]int{{0, 59}, {0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}

// hashDomMax bounds a plain H or H/n in the day-of-month field, as Jenkins does: every month
// has days 1-28, so a hashed day is in every month.
const hashDomMax = 28

// resolveSpec returns spec with every H of its cron fields replaced by concrete values hashed
// from the job's name, so that a spec such as "H H * * *" spreads many jobs over the day while
// each job keeps one fixed time: the same on every replica and across restarts. The forms
// are Jenkins':
//
//   - H: one value of the field's range (0-59 for seconds and minutes, 0-23 for hours,
//     1-28 for the day of month — days every month has —, 1-12 for months, 0-6 for the day
//     of the week);
//   - H(a-b): one value in a-b (numbers, within the field's range);
//   - H/n: every n from a hashed offset below n, e.g. "H/15" in minutes is one of 0-14 and
//     every 15 minutes after it in the hour ("7-59/15");
//   - H(a-b)/n: the same within a-b;
//   - any of these as one element of a list: "0,H(30-40)".
//
// Each field, and each H of a list, gets its own hash. Specs without H, descriptors and
// "@every d" are returned as they are; a "CRON_TZ=Zone " prefix is kept. A malformed H is an
// error (*specError) naming the field. ParseSpec does not accept H: the scheduler resolves a
// job's spec with its name (job.Job.Name) before parsing it.
func resolveSpec(spec, name string) (string, error) {
	s := strings.TrimSpace(spec)
	prefix := ""
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		i := strings.IndexFunc(s, unicode.IsSpace)
		if i < 0 {
			return spec, nil // ParseSpec says what is wrong
		}
		prefix, s = s[:i+1], strings.TrimSpace(s[i:])
	}
	if !strings.Contains(s, "H") || strings.HasPrefix(s, "@") {
		return spec, nil
	}
	fields := strings.Fields(s)
	if len(fields) != 5 && len(fields) != 6 {
		return spec, nil // ParseSpec says what is wrong
	}
	first := 1
	if len(fields) == 6 {
		first = 0
	}
	for i, field := range fields {
		if !strings.Contains(field, "H") {
			continue
		}
		k := first + i
		parts := strings.Split(field, ",")
		for p, part := range parts {
			if !strings.HasPrefix(part, "H") {
				continue
			}
			v, err := resolveH(part, k, tickmath.Hash(name, fieldNames[k], strconv.Itoa(p)))
			if err != nil {
				where := fmt.Sprintf("field %d (%s) %q", i+1, fieldNames[k], field)
				if part != field {
					where += fmt.Sprintf(", %q", part)
				}
				return "", &specError{spec: spec, problem: fmt.Sprintf("%s: %v", where, err)}
			}
			parts[p] = v
		}
		fields[i] = strings.Join(parts, ",")
	}
	return prefix + strings.Join(fields, " "), nil
}

// resolveH rewrites one H element of field k into plain cron syntax, with the hash h.
func resolveH(part string, k int, h uint64) (string, error) {
	lo, hi := fieldBounds[k][0], fieldBounds[k][1]
	if k == 3 {
		hi = hashDomMax
	}
	rest := part[1:]
	example := fmt.Sprintf("H(%d-%d)", lo, min(lo+9, fieldBounds[k][1]))
	if strings.HasPrefix(rest, "(") {
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return "", fmt.Errorf("has no closing parenthesis: write H(a-b), as in %s", example)
		}
		a, b, ok := strings.Cut(rest[1:end], "-")
		ra, erra := strconv.Atoi(a)
		rb, errb := strconv.Atoi(b)
		if !ok || erra != nil || errb != nil {
			return "", fmt.Errorf("write the range as two numbers, H(a-b), as in %s", example)
		}
		if ra > rb || ra < fieldBounds[k][0] || rb > fieldBounds[k][1] {
			return "", fmt.Errorf("the range must go up and stay within %d-%d, as in %s", fieldBounds[k][0], fieldBounds[k][1], example)
		}
		lo, hi, rest = ra, rb, rest[end+1:]
	}
	width := hi - lo + 1
	switch {
	case rest == "":
		return strconv.Itoa(lo + int(h%uint64(width))), nil
	case strings.HasPrefix(rest, "/"):
		n, err := strconv.Atoi(rest[1:])
		if err != nil || n < 1 {
			return "", errors.New("the step after / must be a positive number, as in H/15")
		}
		if n > width {
			return "", fmt.Errorf("the step %d is more than the %d values of %d-%d: give a step of at most %d", n, width, lo, hi, width)
		}
		return fmt.Sprintf("%d-%d/%d", lo+int(h%uint64(n)), hi, n), nil
	}
	return "", errors.New("is not an H form: use H, H(a-b), H/n or H(a-b)/n")
}
