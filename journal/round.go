package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A round on disk: what the writer gathered in one round, made durable by one
// write and one fdatasync.
//
//	magic  4 bytes  "HBRD"
//	seq    u64 BE   one more than the round before it, over the journal's life
//	len    u32 BE   bytes of body
//	crc    u32 BE   CRC-32C of the body
//	hcrc   u32 BE   CRC-32C of the 20 bytes before it
//	body   len bytes: whole records, the last one ending at the body's end
//
// The header's own checksum lets a reader tell the start of a round from
// bytes that only look like one: a bad round with a valid one after it is
// corruption, since a crash tears only the last round.
const (
	RoundHeaderLen = 24
	roundMagic     = "HBRD"
)

var roundMagicBytes = []byte(roundMagic)

// Errors of a round; a CorruptError or a Cut wraps them with the details.
var (
	errRoundShort   = errors.New("round cut short")
	errRoundHeader  = errors.New("no round header (magic or header checksum wrong)")
	errRoundSeq     = errors.New("round out of sequence")
	errRoundCRC     = errors.New("round checksum mismatch")
	errRoundRecords = errors.New("round's records do not end at its end")
)

type roundHeader struct {
	seq uint64
	n   int // body bytes
	crc uint32
}

// putRoundHeader fills b[:RoundHeaderLen] for the body b[RoundHeaderLen:].
func putRoundHeader(b []byte, seq uint64) {
	copy(b, roundMagic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint32(b[12:], uint32(len(b)-RoundHeaderLen))
	binary.BigEndian.PutUint32(b[16:], crc32.Checksum(b[RoundHeaderLen:], castagnoli))
	binary.BigEndian.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
}

// readRoundHeader reads a round header at the start of b: false when b is
// shorter than one, or its magic or checksum is wrong.
func readRoundHeader(b []byte) (roundHeader, bool) {
	if len(b) < RoundHeaderLen || string(b[:4]) != roundMagic ||
		crc32.Checksum(b[:20], castagnoli) != binary.BigEndian.Uint32(b[20:]) {
		return roundHeader{}, false
	}
	return roundHeader{seq: binary.BigEndian.Uint64(b[4:]), n: int(binary.BigEndian.Uint32(b[12:])),
		crc: binary.BigEndian.Uint32(b[16:])}, true
}

// checkRound checks the round at b[off:], which must be round want: its
// header, its body whole with its checksum, its records decoding exactly to
// its end. It hands each record to fn (if not nil) and returns where the
// round ends and its records.
func checkRound(b []byte, off int, want uint64, fn func(Record) error) (end, recs int, err error) {
	if len(b)-off < RoundHeaderLen {
		return 0, 0, fmt.Errorf("%w: %d bytes of its %d-byte header", errRoundShort, len(b)-off, RoundHeaderLen)
	}
	h, ok := readRoundHeader(b[off:])
	if !ok {
		return 0, 0, errRoundHeader
	}
	if h.seq != want {
		return 0, 0, fmt.Errorf("%w: round %d where round %d belongs", errRoundSeq, h.seq, want)
	}
	body := off + RoundHeaderLen
	if h.n < Size(0) || h.n > len(b)-body {
		return 0, 0, fmt.Errorf("%w: round %d of %d bytes, %d there", errRoundShort, h.seq, h.n, len(b)-body)
	}
	end = body + h.n
	if crc32.Checksum(b[body:end], castagnoli) != h.crc {
		at, rerr := walk(b[:end], body, nil)
		if rerr == nil {
			return 0, 0, fmt.Errorf("%w: round %d", errRoundCRC, h.seq)
		}
		return 0, 0, fmt.Errorf("%w: round %d, its record at offset %d: %v", errRoundCRC, h.seq, at, rerr)
	}
	for at := body; at < end; recs++ {
		r, n, rerr := Decode(b[at:end])
		if rerr != nil {
			return 0, 0, fmt.Errorf("%w: round %d, its record at offset %d: %v", errRoundRecords, h.seq, at, rerr)
		}
		if fn != nil {
			if err := fn(r); err != nil {
				return 0, 0, err
			}
		}
		at += n
	}
	return end, recs, nil
}

// nextRoundHeader is the offset of the first round header at or after from
// (magic and header checksum right), or -1.
func nextRoundHeader(b []byte, from int) (int, roundHeader) {
	for from >= 0 && from+RoundHeaderLen <= len(b) {
		i := bytes.Index(b[from:], roundMagicBytes)
		if i < 0 {
			break
		}
		if h, ok := readRoundHeader(b[from+i:]); ok {
			return from + i, h
		}
		from += i + 1
	}
	return -1, roundHeader{}
}

// roundAfter tells whether a round header of a round later than last
// appears anywhere from offset from: then what precedes it is not the tail a
// crash tore.
func roundAfter(b []byte, from int, last uint64) bool {
	for {
		at, h := nextRoundHeader(b, from)
		if at < 0 {
			return false
		}
		if h.seq > last {
			return true
		}
		from = at + 1
	}
}

// countRecords counts the records that decode in b from off on, round by
// round: a round's records up to the first that does not decode, from each
// round header found on. A record past damage inside a round cannot be
// found, so this is a lower bound when the damage is inside one.
func countRecords(b []byte, off int) int {
	n := 0
	for off < len(b) {
		end := len(b)
		if h, ok := readRoundHeader(b[off:]); ok && h.n <= len(b)-off-RoundHeaderLen {
			end = off + RoundHeaderLen + h.n
		}
		next, _ := nextRoundHeader(b, off+1)
		if next >= 0 && next < end {
			end = next
		}
		for at := off + RoundHeaderLen; at < end; {
			_, k, err := Decode(b[at:end])
			if err != nil {
				break
			}
			n++
			at += k
		}
		if next < 0 {
			break
		}
		off = next
	}
	return n
}
