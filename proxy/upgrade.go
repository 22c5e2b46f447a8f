package proxy

import (
	"errors"
	"net/http"
	"strings"
)

// Upgrades. A connection that switches protocols is a tunnel: whatever is
// sent over it after the switch reaches the upstream without passing the
// gateway. An h2c upgrade, say, would carry every later request of the
// connection past authentication, routing and limits. So the only upgrade
// forwarded is a WebSocket handshake that Observer.Upgrade permits; any
// other request asking to upgrade is forwarded as plain HTTP/1.1, without
// Upgrade and HTTP2-Settings (RFC 9110 lets a server ignore Upgrade), and a
// 101 answer to a request that was not forwarded as an upgrade is a 502.

// errUnaskedSwitch is the cause of a 502 for an upstream that switched
// protocols on a request that did not ask to.
var errUnaskedSwitch = errors.New("the upstream switched protocols on a request that was not forwarded as an upgrade")

// upgradeAllowed reports whether in, which asks to upgrade to token, may
// be forwarded as an upgrade: only a WebSocket handshake (GET, HTTP/1.1,
// Upgrade: websocket) that allow permits. The forwarder drops the
// Upgrade and Connection of any other (see outboundHeader), and with
// them HTTP2-Settings, which is connection-specific (RFC 9113, 3.2.1).
func upgradeAllowed(in *http.Request, token string, allow func(*http.Request) bool) bool {
	if token == "" || allow == nil {
		return false
	}
	if in.Method != http.MethodGet || in.ProtoMajor != 1 || in.ProtoMinor < 1 ||
		!strings.EqualFold(strings.TrimSpace(token), "websocket") {
		return false
	}
	return allow(in)
}

// errOtherSwitch is the cause of a 502 for an upstream that switched to
// another protocol than the request asked for.
var errOtherSwitch = errors.New("the upstream switched to another protocol than the request asked for")

// refuseUnaskedSwitch refuses a 101 to a request forwarded without an
// upgrade, or naming another protocol than the request asked for: it
// becomes a 502 through the error funnel instead of a tunnel, marked as written when the exchange wrote the request (see
// exchanges.RoundTrip).
func refuseUnaskedSwitch(res *http.Response) error {
	if res.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	if res.Request == nil {
		return errUnaskedSwitch
	}
	var err error
	switch asked := upgradeType(res.Request.Header); {
	case asked == "":
		err = errUnaskedSwitch
	case !strings.EqualFold(asked, upgradeType(res.Header)):
		err = errOtherSwitch
	default:
		return nil
	}
	if res.Request.Context().Value(switchedWrittenKey{}) != nil {
		return writtenErr{err}
	}
	return err
}

// upgradeType is the protocol h asks to switch to: its Upgrade, when its
// Connection names "upgrade"; "" otherwise. h's names are canonical.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				if up := h["Upgrade"]; len(up) > 0 {
					return up[0]
				}
				return ""
			}
		}
	}
	return ""
}
