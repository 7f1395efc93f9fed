package client

import (
	"errors"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

// TestStatusKinds: every status of docs/PROTOCOL.md has its kind.
func TestStatusKinds(t *testing.T) {
	for _, c := range []struct {
		answer proto.Type
		status uint8
		kind   error // nil: a success
	}{
		{proto.LoginAck, proto.LoginOK, nil},
		{proto.LoginAck, proto.LoginBadToken, ErrBadToken},
		{proto.LoginAck, proto.LoginInvalidUser, ErrInvalidUser},
		{proto.LoginAck, proto.LoginWrongGateway, ErrNoOwner},
		{proto.ShakeResult, proto.ShakeNothing, ErrEmpty},
		{proto.ShakeResult, proto.ShakeGot, nil},
		{proto.ShakeResult, proto.ShakeOverloaded, ErrOverloaded},
		{proto.OpenResult, proto.OpenOK, nil},
		{proto.OpenResult, proto.OpenAlready, ErrAlreadyOpened},
		{proto.OpenResult, proto.OpenNotRecipient, ErrNotRecipient},
		{proto.OpenResult, proto.OpenNoSuch, ErrNoEnvelope},
		{proto.OpenResult, proto.OpenNoShares, ErrNoShares},
		{proto.OpenResult, proto.OpenOverloaded, ErrOverloaded},
		{proto.SendAck, proto.SendOK, nil},
		{proto.SendAck, proto.SendInvalid, ErrInvalid},
		{proto.SendAck, proto.SendOverloaded, ErrOverloaded},
		{proto.SendAck, proto.SendLimited, ErrLimited},
		{proto.ChatAck, proto.ChatHanded, nil},
		{proto.ChatAck, proto.ChatOffline, ErrOffline},
		{proto.ChatAck, proto.ChatOverloaded, ErrOverloaded},
		{proto.ChatAck, proto.ChatLimited, ErrLimited},
		{proto.ShakeResult, 9, ErrUnknownStatus},
		{proto.Pong, 0, nil},
	} {
		err := statusError(c.answer, c.status)
		if (c.kind == nil) != (err == nil) || c.kind != nil && !errors.Is(err, c.kind) {
			t.Errorf("%s %d: %v; want %v", c.answer, c.status, err, c.kind)
		}
	}
	for code, kind := range map[uint8]error{proto.ErrCodeMalformed: ErrMalformed, proto.ErrCodeUnknownType: ErrUnknownType,
		proto.ErrCodeNotLoggedIn: ErrNotLoggedIn, proto.ErrCodeTooLarge: ErrTooLarge, proto.ErrCodeReplaced: ErrReplaced,
		proto.ErrCodeTooSlow: ErrTooSlow, proto.ErrCodeLoginTimeout: ErrLoginTimeout, proto.ErrCodeShuttingDown: ErrShutdown,
		proto.ErrCodeMoved: ErrMoved, 200: ErrUnknownStatus} {
		if err := serverError(code); !errors.Is(err, kind) || err.Code != code {
			t.Errorf("ERROR %d: %v; want %v", code, err, kind)
		}
	}
}
