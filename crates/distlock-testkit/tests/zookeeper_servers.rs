//! The private ZooKeeper servers themselves: a standalone server restarts on its port, and an
//! ensemble elects a new leader when its leader dies and takes the old one back. Without
//! ZooKeeper installed these fail, naming scripts/services.sh zk.

use std::time::Duration;

use distlock_testkit::servers::{
    PrivateStore, start_zookeeper, start_zookeeper_ensemble, zk_command,
};
use distlock_testkit::{Failure, check};

#[test]
fn standalone_answers_again_after_a_restart() -> Result<(), Failure> {
    let mut zk = start_zookeeper()?;
    let port = zk.port();
    check!(
        zk.url() == format!("zk://127.0.0.1:{port}"),
        "unexpected URL {}",
        zk.url()
    );
    check!(zk.keeps_data(), "a ZooKeeper keeps its data");
    let srvr = zk_command(port, "srvr")?;
    check!(srvr.contains("Mode: standalone"), "srvr answered {srvr:?}");

    zk.stop()?;
    check!(
        zk_command(port, "ruok").is_err(),
        "the stopped ZooKeeper still answers"
    );
    zk.start_again()?;
    let srvr = zk_command(port, "srvr")?;
    check!(
        srvr.contains("Mode: standalone"),
        "after the restart srvr answered {srvr:?}"
    );
    Ok(())
}

#[test]
fn ensemble_elects_a_new_leader_when_the_leader_dies() -> Result<(), Failure> {
    let mut zk = start_zookeeper_ensemble(3)?;
    let ports: Vec<u16> = (0..3).map(|i| zk.client_port(i)).collect();
    check!(
        zk.url(Duration::from_secs(4))
            == format!(
                "zk://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}?timeout=4000ms",
                ports[0], ports[1], ports[2]
            ),
        "unexpected URL {}",
        zk.url(Duration::from_secs(4))
    );
    check!(
        zk.member_url(1, Duration::from_millis(2500))
            == format!("zk://127.0.0.1:{}?timeout=2500ms", ports[1]),
        "unexpected member URL {}",
        zk.member_url(1, Duration::from_millis(2500))
    );

    let old = zk.leader()?;
    zk.kill(old)?;
    let new = zk.leader()?;
    check!(new != old, "member {old} was killed but still leads");

    zk.start_again(old)?;
    let srvr = zk_command(ports[old], "srvr")?;
    check!(
        srvr.contains("Mode: follower"),
        "the old leader, started again, answered {srvr:?}"
    );
    check!(
        zk.leader()? == new,
        "the returning member took the lead back"
    );

    // A paused follower is left out; the ensemble still has its quorum and leader.
    let follower = (0..3).find(|&i| i != new).unwrap_or(0);
    zk.stop(follower)?;
    check!(
        zk.leader()? == new,
        "the leader changed when a follower paused"
    );
    zk.cont(follower)?;
    Ok(())
}
