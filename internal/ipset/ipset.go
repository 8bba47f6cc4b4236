// Package ipset is a set of IP address ranges that answers membership
// without allocating, and the parsing of the address lists webhook
// providers publish: one address or CIDR range a line, or JSON.
package ipset

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Set is an immutable set of address ranges. Contains allocates nothing;
// a Set is safe for concurrent use. The zero Set, and a nil *Set, hold
// nothing.
type Set struct {
	v4       []level4
	v6       []level6
	prefixes []netip.Prefix // canonical, sorted, without duplicates
}

// level4 holds the IPv4 ranges of one prefix length, sorted.
type level4 struct {
	mask uint32
	nets []uint32
}

// level6 holds the IPv6 ranges of one prefix length, sorted.
type level6 struct {
	hi, lo uint64 // the mask
	nets   []addr6
}

type addr6 struct{ hi, lo uint64 }

func cmp6(a, b addr6) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// New builds a set of prefixes (as ParsePrefix returns them: masked, an
// IPv4-mapped range as IPv4).
func New(prefixes []netip.Prefix) *Set {
	s := &Set{prefixes: Canonical(prefixes)}
	v4 := map[int][]uint32{}
	v6 := map[int][]addr6{}
	for _, p := range s.prefixes {
		bits := p.Bits()
		if p.Addr().Is4() {
			b := p.Addr().As4()
			v4[bits] = append(v4[bits], be32(b[:]))
			continue
		}
		b := p.Addr().As16()
		v6[bits] = append(v6[bits], addr6{be64(b[:8]), be64(b[8:])})
	}
	for bits, nets := range v4 {
		slices.Sort(nets)
		s.v4 = append(s.v4, level4{mask: mask32(bits), nets: nets})
	}
	for bits, nets := range v6 {
		slices.SortFunc(nets, cmp6)
		hi, lo := mask128(bits)
		s.v6 = append(s.v6, level6{hi: hi, lo: lo, nets: nets})
	}
	// shortest prefixes first: the widest ranges answer most addresses
	slices.SortFunc(s.v4, func(a, b level4) int { return cmp.Compare(a.mask, b.mask) })
	slices.SortFunc(s.v6, func(a, b level6) int { return cmp6(addr6{a.hi, a.lo}, addr6{b.hi, b.lo}) })
	return s
}

// Canonical returns prefixes masked, IPv4-mapped ranges as IPv4, sorted
// and without duplicates.
func Canonical(prefixes []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			continue
		}
		out = append(out, canonical(p))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return slices.Compact(out)
}

// canonical masks a valid prefix and turns an IPv4-mapped one into IPv4.
func canonical(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

// Contains reports whether an address is in one of the set's ranges. An
// IPv4-mapped IPv6 address is looked up as IPv4; a zone is ignored.
func (s *Set) Contains(a netip.Addr) bool {
	if s == nil || !a.IsValid() {
		return false
	}
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		b := a.As4()
		x := be32(b[:])
		for _, l := range s.v4 {
			if _, ok := slices.BinarySearch(l.nets, x&l.mask); ok {
				return true
			}
		}
		return false
	}
	b := a.As16()
	hi, lo := be64(b[:8]), be64(b[8:])
	for _, l := range s.v6 {
		if _, ok := slices.BinarySearchFunc(l.nets, addr6{hi & l.hi, lo & l.lo}, cmp6); ok {
			return true
		}
	}
	return false
}

// Len returns the number of ranges in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.prefixes)
}

// Prefixes returns the set's ranges, sorted; the slice must not be
// modified.
func (s *Set) Prefixes() []netip.Prefix {
	if s == nil {
		return nil
	}
	return s.prefixes
}

// Strings returns the set's ranges as text, an address alone for a range
// of one.
func (s *Set) Strings() []string {
	out := make([]string, 0, s.Len())
	for _, p := range s.Prefixes() {
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return out
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func be64(b []byte) uint64 {
	return uint64(be32(b[:4]))<<32 | uint64(be32(b[4:]))
}

func mask32(bits int) uint32 {
	if bits == 0 {
		return 0
	}
	return ^uint32(0) << (32 - bits)
}

func mask128(bits int) (hi, lo uint64) {
	switch {
	case bits == 0:
		return 0, 0
	case bits <= 64:
		return ^uint64(0) << (64 - bits), 0
	case bits == 128:
		return ^uint64(0), ^uint64(0)
	default:
		return ^uint64(0), ^uint64(0) << (128 - bits)
	}
}

// ParsePrefix parses an address (`192.0.2.7`, `2001:db8::1`, a range of
// one) or a CIDR range (`192.0.2.0/24`). The range is masked
// (`192.0.2.7/24` is `192.0.2.0/24`) and an IPv4-mapped one is IPv4; a
// zone is refused.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("%q: an address with a zone is not a range", s)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range", s)
		}
		if p.Addr().Is4In6() && p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped range needs at least 96 bits", s)
		}
		return canonical(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR range", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseAll parses addresses and ranges with ParsePrefix.
func ParseAll(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// MaxRanges bounds the ranges one list may hold.
const MaxRanges = 100_000

// ErrEmpty is the error of a list that holds no range.
var ErrEmpty = errors.New("the list holds no address")
