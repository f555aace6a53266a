//! etcd cluster failure tests (being written).
