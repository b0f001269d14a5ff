// Package option holds what the functional options of every package of
// bucketgrid share: a constructor given an option it does not take panics,
// naming both, instead of silently ignoring it.
package option

import (
	"fmt"
	"strings"
)

// Check panics when set, a set of options one bit each, holds an option
// outside allowed, the options that the constructor who of package pkg
// takes; names[i] names the option of bit i.
func Check(pkg, who string, set, allowed uint64, names []string) {
	extra := set &^ allowed
	if extra == 0 {
		return
	}
	var given []string
	for i, name := range names {
		if extra&(1<<i) != 0 {
			given = append(given, name)
		}
	}
	panic(fmt.Sprintf("%s: %s does not take %s", pkg, who, strings.Join(given, ", ")))
}
