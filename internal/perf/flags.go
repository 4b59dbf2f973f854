package perf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// errHelp is returned by Parse for -h: print the usage and exit 0;
// errVersion for -V: print the version and exit 0.
var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// UsageError is a bad command line: exit status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// Parse reads the command line: [TEST] [flags] [SERVER], flags and
// arguments in any order as getopt permutes them. With no TEST it returns
// Params for the demo (Test is WriteBW and demo is true).
func Parse(args []string) (p *Params, demo bool, err error) {
	p = &Params{set: map[string]bool{}}
	c := &cmdline{p: p}
	fs := flag.NewFlagSet("iwarp-perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	long := map[string]string{} // every name of a flag → its long name
	for _, o := range options {
		v := o.value(c)
		for _, name := range append([]string{o.short, o.long}, o.aliases...) {
			if name != "" {
				fs.Var(v, name, "")
				long[name] = o.long
			}
		}
	}

	var pos []string
	rest := splitShort(fs, args)
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, false, usagef("%v", err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if c.help {
		return nil, false, errHelp
	}
	if c.version {
		return nil, false, errVersion
	}
	fs.Visit(func(f *flag.Flag) { p.set[long[f.Name]] = true })
	for _, step := range cmdlineSteps {
		if err := step(c); err != nil {
			return nil, false, err
		}
	}

	if len(pos) == 0 {
		// The demo: RDMA Write bandwidth over loopback, then raw TCP.
		p.Test = WriteBW
		p.Loopback = true
		if !p.isSet("duration") && !p.isSet("iters") {
			p.Duration = 3 * time.Second
		}
		if p.All {
			return nil, false, usagef("the demo runs one size: give a TEST to use -a")
		}
		if p.LimitBW != 0 || p.LimitMsgRate != 0 {
			return nil, false, usagef("the demo compares with TCP: give a TEST to use -w or -y")
		}
		if err := p.finish(); err != nil {
			return nil, false, usagef("%v", err)
		}
		return p, true, nil
	}
	t, ok := ParseTest(pos[0])
	if !ok {
		return nil, false, usagef("unknown test %q: use one of %s", pos[0], strings.Join(testNames[:], ", "))
	}
	p.Test = t
	switch len(pos) {
	case 1:
	case 2:
		p.Server = pos[1]
	default:
		return nil, false, usagef("too many arguments: %s", strings.Join(pos[2:], " "))
	}
	if err := p.finish(); err != nil {
		return nil, false, usagef("%v", err)
	}
	return p, false, nil
}

// The flag values: each lets several names (perftest's short and long
// ones) share one variable.
type (
	intValue    int
	boolValue   bool
	stringValue string
	floatValue  float64
	// sizeValue is a message size, with perftest's K and M suffixes (and
	// G, KiB ...: parseSize).
	sizeValue int
)

// intVal, sizeVal and strVal set *dst to its default and return it as a
// flag value.
func intVal(dst *int, def int) *intValue { *dst = def; return (*intValue)(dst) }

func sizeVal(dst *int, def int) *sizeValue { *dst = def; return (*sizeValue)(dst) }

func strVal(dst *string, def string) *stringValue { *dst = def; return (*stringValue)(dst) }

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize) // an int's range: 32 bits on 32-bit ports
	if err != nil {
		return fmt.Errorf("%q is not a number of this range", s)
	}
	*v = intValue(n)
	return nil
}

func (v *sizeValue) String() string { return strconv.Itoa(int(*v)) }
func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n > math.MaxInt {
		return fmt.Errorf("%q is not a size (a number, or with K, M or G)", s)
	}
	*v = sizeValue(n)
	return nil
}

// splitShort rewrites getopt's short forms, which Go's flag package does
// not take, as perftest command lines use them: "-n100" as "-n 100" and
// "-ab" as "-a -b". An argument that names a flag as it is ("-size") is
// left alone.
func splitShort(fs *flag.FlagSet, args []string) []string {
	isBool := func(f *flag.Flag) bool {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") || fs.Lookup(a[1:]) != nil {
			out = append(out, a)
			continue
		}
		f := fs.Lookup(a[1:2])
		switch {
		case f == nil:
			out = append(out, a) // flag reports it
		case !isBool(f):
			out = append(out, a[:2], a[2:])
		default:
			all := true
			for _, c := range a[1:] {
				if g := fs.Lookup(string(c)); g == nil || !isBool(g) {
					all = false
				}
			}
			if !all {
				out = append(out, a)
				continue
			}
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
		}
	}
	return out
}

// parseSeconds reads a duration: a number of seconds ("15", "0.5") or Go's
// form ("500ms", "2m").
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f > float64(math.MaxInt64/int64(time.Second)) {
			return 0, fmt.Errorf("%s seconds is too long", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// parseSize reads a size in octets: a number, optionally with a binary
// unit (K, KiB, M, MiB, G, GiB; KB, MB and GB count as binary too).
func parseSize(s string) (int64, error) {
	num := s[:len(s)-len(strings.TrimLeft(s, "0123456789"))]
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
		"G": 30, "GB": 30, "GIB": 30}[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return n << shift, nil
}

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v = boolValue(b)
	return nil
}

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// flag's own words for a float64 flag.
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("value out of range")
		}
		return errors.New("parse error")
	}
	*v = floatValue(f)
	return nil
}
