"""The tests' one free-port finder (tests.cluster.netns_cluster.free_port) never gives a port every Ray node takes
by default: a netns cluster's head started on 52365 failed ("used by other components")."""

from __future__ import annotations


def test_the_ports_left_out_are_rays_own_defaults():
    from ray._private import ray_constants

    from tests.cluster.netns_cluster import RAY_DEFAULT_PORTS

    assert RAY_DEFAULT_PORTS == {ray_constants.DEFAULT_PORT, ray_constants.DEFAULT_DASHBOARD_PORT,
                                 ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT}


def test_free_port_skips_them(monkeypatch):
    import socket

    from tests.cluster.netns_cluster import free_port

    offered = iter([52365, 8265, 20001])  # what the system offers, in turn

    class Offer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            self.port = next(offered)

        def getsockname(self):
            return ("0.0.0.0", self.port)

    monkeypatch.setattr(socket, "socket", Offer)
    assert free_port() == 20001
