"""Calls to the tracking store are repeated only for typed transient errors: a locked SQLite
store, a tracking server (or its proxy) answering 502, 503 or 504, a lost connection. An
error that merely names such a number (a run id holding "503") is not transient, and
``create_run`` is repeated only where the store guarantees it wrote nothing (SQLite busy),
since a lost answer to it may come after the run was made.

The stores are real: MLflow on a SQLite file held locked by another connection, and
MLflow's REST client talking to a loopback HTTP server that answers as told.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from autorl.storage.tracking import RetryingClient

RUN_ID = "0503502504a34c0e9d5b1f2e3a4b5c6d"  # a run id may hold the digits of any status


class Counting:
    """A real MlflowClient, counting the calls that reach it."""

    def __init__(self, client):
        self.client, self.calls = client, 0

    def __getattr__(self, name: str):
        attribute = getattr(self.client, name)

        def call(*args, **kwargs):
            self.calls += 1
            return attribute(*args, **kwargs)

        return call


def retrying(client, attempts: int = 4) -> RetryingClient:
    return RetryingClient(client, attempts=attempts, first_delay=0.05)


# -- a local SQLite store ---------------------------------------------------------------------


def test_an_error_naming_503_is_not_retried(tracker):
    tracker.ensure_store()
    client = Counting(MlflowClient(tracker.uri))
    for call in (lambda: retrying(client).get_run(RUN_ID), lambda: retrying(client).set_tag(RUN_ID, "k", "v")):
        client.calls = 0
        with pytest.raises(MlflowException, match=f"{RUN_ID}.*not found|not found.*{RUN_ID}"):
            call()
        assert client.calls == 1


@pytest.mark.slow  # MLflow waits 20 s on a locked SQLite store before it reports it
def test_a_locked_store_is_retried_even_for_create_run(tracker):
    """SQLite busy means nothing was written, so even creating a run is repeated, and makes one run."""
    experiment = tracker.ensure_store()
    database = tracker.uri.removeprefix("sqlite:///")
    client = Counting(MlflowClient(tracker.uri))
    holder = sqlite3.connect(database, timeout=0, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # held past MLflow's 20-s busy timeout: the first try fails
    threading.Timer(21.0, holder.rollback).start()
    started = time.monotonic()
    run = RetryingClient(client, attempts=6, first_delay=0.5).create_run(experiment, run_name="once")
    assert time.monotonic() - started >= 20.0
    assert client.calls == 2  # the first failed with "database is locked", the second waited and made it
    made = MlflowClient(tracker.uri).search_runs([experiment], filter_string="attributes.run_name = 'once'")
    assert [r.info.run_id for r in made] == [run.info.run_id]


# -- a tracking server ------------------------------------------------------------------------

DROP = "drop"  # read the request, then close the connection without an answer


class Server:
    """A loopback tracking server answering each request with the next of ``answers``
    (an HTTP status, with ``body``, or DROP), then 200 with ``{}``."""

    def __init__(self, answers: list, body: bytes = b"busy", port: int = 0):
        self.answers, self.body, self.requests = list(answers), body, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests.append(self.path)
                what = server.answers.pop(0) if server.answers else 200
                if what == DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                body = b"{}" if what == 200 else server.body
                self.send_response(what)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def serve(monkeypatch):
    """Start Servers; MLflow's own HTTP retries are turned off, so each failure reaches the client."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    started = []

    def start(answers: list, **kwargs) -> Server:
        started.append(Server(answers, **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_server_answering_a_transient_status_is_retried(serve, status):
    server = serve([status])
    retrying(MlflowClient(server.url)).set_tag(RUN_ID, "k", "v")
    assert len(server.requests) == 2


def test_a_server_error_is_not_retried(serve):
    server = serve([500])
    with pytest.raises(MlflowException):
        retrying(MlflowClient(server.url)).set_tag(RUN_ID, "k", "v")
    assert len(server.requests) == 1


def test_a_server_refusal_naming_503_is_not_retried(serve):
    server = serve([404], body=b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Run 503 not found (502)"}')
    with pytest.raises(MlflowException, match="Run 503 not found"):
        retrying(MlflowClient(server.url)).set_tag(RUN_ID, "k", "v")
    assert len(server.requests) == 1


def test_a_dropped_connection_is_retried(serve):
    server = serve([DROP])
    retrying(MlflowClient(server.url)).set_tag(RUN_ID, "k", "v")
    assert len(server.requests) == 2


def test_a_refused_connection_is_retried_until_the_server_is_up(serve):
    with socket.socket() as probe:  # a port nothing listens on, until the timer starts the server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    servers = []
    timer = threading.Timer(0.3, lambda: servers.append(serve([], port=port)))
    timer.start()
    RetryingClient(MlflowClient(f"http://127.0.0.1:{port}"), attempts=6, first_delay=0.2).set_tag(RUN_ID, "k", "v")
    timer.join()
    assert len(servers[0].requests) == 1


@pytest.mark.parametrize("failure", [DROP, 503, 504])
def test_create_run_is_not_repeated_after_an_unknown_outcome(serve, failure):
    """The request reached the server: the run may exist, and a second call would make another."""
    server = serve([failure])
    with pytest.raises(MlflowException):
        retrying(MlflowClient(server.url)).create_run("0", run_name="once")
    assert server.requests == ["/api/2.0/mlflow/runs/create"]
