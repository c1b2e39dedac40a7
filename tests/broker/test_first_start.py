"""A first start reads as one: a new (or empty) data directory is logged as created
(`data_dir_created`), not as a recovery without a clean shutdown marker; a later start loads as
usual. Stdout names each listener once: the ready lines announce the first native and the first
Kafka listener, `strata listener ...` lines the others."""

from __future__ import annotations

from tests.broker_process import BrokerProcess


def events_named(broker: BrokerProcess, name: str) -> list[dict]:
    return [e for e in broker.log_events() if e.get("event") == name]


def test_a_new_data_directory_is_created_not_recovered(tmp_path):
    with BrokerProcess(tmp_path / "new") as broker:
        broker.start()
        assert broker.stop() == 0
        (created,) = events_named(broker, "data_dir_created")
        assert created["existed"] is False and created["data_dir"] == str(tmp_path / "new")
        assert events_named(broker, "logs_recovering") == []
        assert "no clean shutdown marker" not in broker.stderr_text()
        # the next start is not a first start: it loads after the clean shutdown
        broker.restart()
        assert broker.stop() == 0
        assert len(events_named(broker, "data_dir_created")) == 1
        (loading,) = events_named(broker, "logs_recovering")
        assert (loading["clean_shutdown"], loading["action"]) == (True, "loading")


def test_an_empty_existing_data_directory_is_a_first_start(tmp_path):
    (tmp_path / "empty").mkdir()
    with BrokerProcess(tmp_path / "empty") as broker:
        broker.start()
        assert broker.stop() == 0
        (created,) = events_named(broker, "data_dir_created")
        assert created["existed"] is True
        assert events_named(broker, "logs_recovering") == []


def test_a_crash_before_any_topic_still_recovers(tmp_path):
    with BrokerProcess(tmp_path / "d") as broker:
        broker.start()
        broker.kill()
        broker.restart()
        assert broker.stop() == 0
        (recovering,) = events_named(broker, "logs_recovering")
        assert recovering["action"] == "recovering: no clean shutdown marker"
        assert len(events_named(broker, "data_dir_created")) == 1


def test_each_listener_is_printed_once(tmp_path):
    with BrokerProcess(tmp_path / "one") as broker:
        broker.start()
        assert broker.stop() == 0
        assert [line.rpartition(" on ")[0] for line in broker.printed] == [
            "strata listening", "strata kafka listening", "strata admin listening"]
    with BrokerProcess(tmp_path / "many", "--set", "listeners=PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                       "--set", "native.listeners=PLAINTEXT://127.0.0.1:0,SECOND://127.0.0.1:0",
                       "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT,"
                                "SECOND:PLAINTEXT") as broker:
        broker.start()
        listeners = broker.read_listeners(4)
        assert broker.stop() == 0
        printed = broker.printed
        assert printed[:3] == [f"strata listening on 127.0.0.1:{broker.port}",
                               f"strata kafka listening on 127.0.0.1:{broker.kafka_port}",
                               f"strata admin listening on http://127.0.0.1:{broker.admin_port}"]
        others = sorted(printed[3:])
        assert others == sorted([
            f"strata listener kafka OTHER PLAINTEXT on 127.0.0.1:{listeners['kafka', 'OTHER'][1]}",
            f"strata listener native SECOND PLAINTEXT on 127.0.0.1:{listeners['native', 'SECOND'][1]}"])
        assert listeners["native", "PLAINTEXT"] == broker.address
        assert listeners["kafka", "PLAINTEXT"] == broker.kafka_address
        for _protocol_name, (_host, port) in listeners.items():
            assert sum(line.endswith(f":{port}") for line in printed) == 1
