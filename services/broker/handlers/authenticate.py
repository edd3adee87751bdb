"""AUTHENTICATE: the shared token, compared in constant time. The connection decides what a
failure means (it closes); without a broker token every token is accepted."""

from __future__ import annotations

import hmac

from common.kaska.errors import AuthenticationError
from common.kaska.protocol.authenticate import AuthenticateRequest
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, AuthenticateRequest)
    expected = ctx.config.token
    if expected is not None and not hmac.compare_digest(request.token, expected.encode()):
        raise AuthenticationError("wrong token")
    return Reply()
