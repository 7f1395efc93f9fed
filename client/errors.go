package client

import (
	"errors"
	"fmt"

	"github.com/hongbao-io/hongbao/proto"
)

// The kinds of refusal a request can get, each wrapped by a *StatusError
// that names the request and the status: test with errors.Is.
var (
	// ErrEmpty: SHAKE_RESULT 0, the pool of the user's SET is empty.
	ErrEmpty = errors.New("nothing this time: the pool is empty")
	// ErrOverloaded: SHAKE_RESULT 2, OPEN_RESULT 5, SEND_ACK 2, CHAT_ACK 2:
	// refused at the door (or, in a cluster, a crossing not answered in
	// time); nothing was done for SHAKE and SEND. Try later. An OPEN's
	// share may have been drawn in a cluster: Open again learns it.
	ErrOverloaded = errors.New("overloaded: try later")
	// ErrAlreadyOpened: OPEN_RESULT 1; the amount returned with it is the
	// earlier share.
	ErrAlreadyOpened = errors.New("already opened")
	// ErrNotRecipient: OPEN_RESULT 2.
	ErrNotRecipient = errors.New("not a recipient of the envelope")
	// ErrNoEnvelope: OPEN_RESULT 3, unknown, expired or forgotten.
	ErrNoEnvelope = errors.New("no such envelope")
	// ErrNoShares: OPEN_RESULT 4.
	ErrNoShares = errors.New("no shares left")
	// ErrInvalid: SEND_ACK 1, the SEND breaks the server's rules.
	ErrInvalid = errors.New("invalid SEND")
	// ErrLimited: SEND_ACK 3 or CHAT_ACK 3, over a rate or a budget: try
	// later.
	ErrLimited = errors.New("over a limit: try later")
	// ErrRequestExpired: SHAKE_RESULT 3, OPEN_RESULT 6, SEND_ACK 4: the
	// request id was outside the server's window (a retry too late, or a
	// clock far from the server's); nothing was done.
	ErrRequestExpired = errors.New("request id outside the server's window: nothing done")
	// ErrOffline: CHAT_ACK 1, the recipient is not connected.
	ErrOffline = errors.New("recipient not connected")
	// ErrBadToken: LOGIN_ACK 1.
	ErrBadToken = errors.New("bad or expired token")
	// ErrInvalidUser: LOGIN_ACK 2.
	ErrInvalidUser = errors.New("invalid user")
	// ErrNoOwner: LOGIN_ACK 3 with no address: the user's SET has no
	// gateway right now. Login retries it until its context ends.
	ErrNoOwner = errors.New("the user's SET has no gateway right now")
	// ErrUnknownStatus: a status this package does not know (a newer server).
	ErrUnknownStatus = errors.New("unknown status")
)

// StatusError is a request answered with a status other than success.
type StatusError struct {
	Answer proto.Type // the answer's type: SHAKE_RESULT, OPEN_RESULT…
	Status uint8
	Kind   error // one of the Err… above
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("hongbao: %s %d: %v", e.Answer, e.Status, e.Kind)
}

func (e *StatusError) Unwrap() error { return e.Kind }

// statusKinds maps each answer's statuses to their kinds; success is nil.
var statusKinds = map[proto.Type][]error{
	proto.LoginAck:    {nil, ErrBadToken, ErrInvalidUser, ErrNoOwner},
	proto.ShakeResult: {ErrEmpty, nil, ErrOverloaded, ErrRequestExpired},
	proto.OpenResult:  {nil, ErrAlreadyOpened, ErrNotRecipient, ErrNoEnvelope, ErrNoShares, ErrOverloaded, ErrRequestExpired},
	proto.SendAck:     {nil, ErrInvalid, ErrOverloaded, ErrLimited, ErrRequestExpired},
	proto.ChatAck:     {nil, ErrOffline, ErrOverloaded, ErrLimited},
}

// statusError is nil for a success, else the *StatusError of status.
func statusError(answer proto.Type, status uint8) error {
	kinds, ok := statusKinds[answer]
	if !ok {
		return nil // PONG: no status
	}
	kind := ErrUnknownStatus
	if int(status) < len(kinds) {
		if kind = kinds[status]; kind == nil {
			return nil
		}
	}
	return &StatusError{Answer: answer, Status: status, Kind: kind}
}

// The ERROR codes, each wrapped by a *ServerError: test with errors.Is.
var (
	ErrMalformed    = errors.New("malformed frame")
	ErrUnknownType  = errors.New("unknown frame type")
	ErrNotLoggedIn  = errors.New("not logged in")
	ErrTooLarge     = errors.New("frame too large")
	ErrReplaced     = errors.New("replaced by a newer LOGIN of the same user")
	ErrTooSlow      = errors.New("too slow: the connection's unread output passed its limit")
	ErrLoginTimeout = errors.New("no LOGIN in time")
	ErrShutdown     = errors.New("the server is shutting down")
	// ErrMoved: the gateway no longer serves the user's SET (it failed over
	// to another); what it had not answered gets no answer.
	ErrMoved = errors.New("moved: the gateway no longer serves the user's SET")
)

var errorKinds = []error{nil, ErrMalformed, ErrUnknownType, ErrNotLoggedIn, ErrTooLarge, ErrReplaced,
	ErrTooSlow, ErrLoginTimeout, ErrShutdown, ErrMoved}

// ServerError is an ERROR frame: the server closed the connection after it.
// A Client logs in again after ErrShutdown and ErrMoved, elsewhere or
// later. Any other ERROR is final: the Client stops, and every request
// fails with it (see the package doc).
type ServerError struct {
	Code uint8
	Kind error // one of the codes' Err… above, ErrUnknownStatus for a newer one
}

func (e *ServerError) Error() string { return fmt.Sprintf("hongbao: ERROR %d: %v", e.Code, e.Kind) }

func (e *ServerError) Unwrap() error { return e.Kind }

func serverError(code uint8) *ServerError {
	kind := ErrUnknownStatus
	if int(code) < len(errorKinds) && errorKinds[code] != nil {
		kind = errorKinds[code]
	}
	return &ServerError{Code: code, Kind: kind}
}

// ErrConnLost: the connection went away before the request was answered,
// and the Client does not send it again: a Chat or a Ping, or any request
// once the Client cannot log in again. The request may or may not have been
// carried out (a SHAKE's envelope may be counted as taken). When an ERROR ended the connection, the request's
// error is its *ServerError too: errors.Is(err, ErrMoved) holds as well.
var ErrConnLost = errors.New("hongbao: connection lost before the answer")

// ErrClosed: the Client was closed.
var ErrClosed = errors.New("hongbao: client closed")

// ErrNotLoggedInYet: a request before Login.
var ErrNotLoggedInYet = errors.New("hongbao: Login first")
