from collections import deque

import pytest
from floodway.engine.server.frontend import drain_rate
from floodway.engine.server.state import ServerOptions


def test_drain_rate_counts_departures_in_the_window_and_forgets_older_ones():
    departures = deque([1.0, 2.0, 11.5, 12.0, 13.0])
    assert drain_rate(departures, now=14.0, window_s=10.0) == pytest.approx(0.3)
    assert list(departures) == [11.5, 12.0, 13.0]
    assert drain_rate(deque(), now=5.0) == 0.0


@pytest.mark.parametrize("kw,field", [
    ({"max_waiting_requests": 0}, "max_waiting_requests"), ({"max_waiting_tokens": -5}, "max_waiting_tokens"),
    ({"max_body_bytes": 10}, "max_body_bytes"), ({"drain_timeout_s": -1}, "drain_timeout_s"),
])
def test_server_options_reject_bad_values_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        ServerOptions(**kw).validate()
