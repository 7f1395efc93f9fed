package server_test

import (
	"encoding/binary"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// An impostor: a client acting for another user who is online.

// attackImpostor tries to act for victim, a well-behaved user who is online:
// LOGIN as it without its token, OPEN of an envelope addressed to it, the
// victim's id in body bytes where the protocol has no user field, and a
// second LOGIN, as the victim with a good token, on a logged-in connection.
// The victim must see nothing of it (its load-client run would count any
// stray answer, push or ERROR 5 as an error).
func attackImpostor(money *attacker) {
	t, ts := money.t, money.ts
	const victim = 7
	const imp, peer = impostorUser, impostorUser + 1
	victimID := binary.BigEndian.AppendUint32(nil, victim)
	// with appends the victim's id to frame as trailing bytes (allowed, and
	// ignored: room for later versions).
	with := func(frame []byte) []byte {
		f := append(append([]byte(nil), frame...), victimID...)
		binary.BigEndian.PutUint16(f, uint16(len(f)))
		return f
	}
	bad := dial(t, ts)
	bad.login(imp, tokenFor(imp))
	h := dial(t, ts)
	h.login(peer, tokenFor(peer))

	// LOGIN as the victim with the impostor's own token, an expired one,
	// and one minted with another secret.
	for name, tok := range map[string][]byte{
		"the impostor's token": tokenFor(imp),
		"an expired token":     proto.MintToken(nil, hostileSecret, victim, time.Now().Add(-time.Minute).Unix()),
		"a forged token":       proto.MintToken(nil, []byte("guess"), victim, time.Now().Add(time.Hour).Unix()),
	} {
		c := dial(t, ts)
		if st := c.loginStatus(victim, tok); st != proto.LoginBadToken {
			t.Fatalf("impostor: LOGIN as the victim with %s: status %d; want 1", name, st)
		}
		c.expectClosed()
	}

	// An envelope for the victim alone: the impostor may not open it, with
	// or without the victim's id after the envelope id.
	s := h.nextStamp()
	h.send(proto.AppendSend(nil, s, 50, []uint32{victim}))
	st, env := h.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("impostor: SEND_ACK status %d; want 0", st)
	}
	for _, f := range [][]byte{proto.AppendOpen(nil, bad.nextStamp(), env), with(proto.AppendOpen(nil, bad.nextStamp(), env))} {
		bad.send(f)
		if st, e, amount := bad.answer(binary.BigEndian.Uint64(f[4:])).OpenResult(); st != proto.OpenNotRecipient || e != env || amount != 0 {
			t.Errorf("impostor: OPEN of the victim's envelope: status %d envelope %#x amount %d; want 2, %#x, 0", st, e, amount, env)
		}
	}

	// The victim's id in body bytes: the answers are the impostor's, and
	// what it causes is in its name.
	s = bad.nextStamp()
	bad.send(with(proto.AppendShake(nil, s)))
	if f := bad.answer(s); f.Type != proto.ShakeResult {
		t.Errorf("impostor: SHAKE answered by %s", describe(f))
	} else if st, _, amount := f.ShakeResult(); st == proto.ShakeGot {
		money.shake.Add(uint64(amount))
	}
	s = bad.nextStamp()
	bad.send(with(proto.AppendPing(nil, s)))
	if f := bad.answer(s); f.Type != proto.Pong {
		t.Errorf("impostor: PING answered by %s", describe(f))
	}
	s = bad.nextStamp()
	bad.send(with(proto.AppendChat(nil, s, peer, []byte("from whom?"))))
	if st, _ := bad.answer(s).ChatAck(); st != proto.ChatHanded {
		t.Errorf("impostor: CHAT_ACK status %d; want 0", st)
	}
	if from, text := h.push(proto.ChatDeliver).ChatDeliver(); from != imp || string(text) != "from whom?" {
		t.Errorf("impostor: CHAT_DELIVER from %d %q; want from the impostor %d", from, text, imp)
	}
	s = bad.nextStamp()
	bad.send(with(proto.AppendSend(nil, s, 30, []uint32{peer})))
	st, sent := bad.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("impostor: SEND_ACK status %d; want 0", st)
	}
	for { // the send campaign may push the peer others: opened too
		e, sender, total, _ := h.push(proto.Envelope).Envelope()
		s = h.nextStamp()
		h.send(proto.AppendOpen(nil, s, e))
		st, _, amount := h.answer(s).OpenResult()
		if st != proto.OpenOK {
			t.Fatalf("impostor: the peer's OPEN of %#x: status %d; want 0", e, st)
		}
		money.open.Add(uint64(amount))
		if e != sent {
			continue
		}
		if sender != imp || total != 30 || amount != 30 {
			t.Errorf("impostor: ENVELOPE from %d total %d, opened for %d; want from the impostor %d, 30, 30", sender, total, amount, imp)
		}
		break
	}

	// A second LOGIN, as the victim with the victim's own good token, on the
	// impostor's connection: ERROR 1 and the close; the victim stays online.
	bad.send(proto.AppendLogin(nil, 99, victim, tokenFor(victim)))
	bad.expectError(proto.ErrCodeMalformed)
	s = h.nextStamp()
	h.send(proto.AppendChat(nil, s, victim, []byte("still you?")))
	if st, _ := h.answer(s).ChatAck(); st != proto.ChatHanded {
		t.Errorf("impostor: CHAT to the victim after the second LOGIN: status %d; want 0, the victim online", st)
	}
	// The envelope stays the victim's: the impostor's OPENs took nothing
	// (the victim's own OPEN, from the load client, is in its report).
	h.c.Close()
}
