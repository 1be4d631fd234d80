package main

import (
	"regexp"
	"strings"
)

// historyPhrase matches the phrases that narrate how the code used to be rather than say what
// it is: the docs state current behaviour, and history belongs in CHANGELOG.md. The list is
// kept small and precise, so that it has no false alarms on the docs' ordinary prose ("no
// longer holds" of a lock, "before the lock can expire" are current behaviour and pass).
var historyPhrase = regexp.MustCompile(`(?i)\b(previously|formerly|used to be|as it was before|before the checker had|` +
	`was changed|were changed|has been (?:fixed|changed|removed)|in (?:earlier|older|previous) (?:versions|releases)|` +
	`until recently|gave \w+ a slower)\b|(?:^|[.!?:]\s+)Now\b`)

// narration returns the history narration found in text's prose, outside fenced code blocks.
func narration(text string) []problem {
	var problems []problem
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range historyPhrase.FindAllString(line, -1) {
			problems = append(problems, problem{line: i + 1, name: strings.TrimLeft(m, ".!?: \t"),
				why: "narrates history: say what is true now, and put how it changed in CHANGELOG.md"})
		}
	}
	return problems
}
