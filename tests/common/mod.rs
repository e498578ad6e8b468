//! Shared helpers of the integration tests: one fresh redis-server per test.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use fred::prelude::*;
use redisync::Client;
use redisync_testkit::RedisServer;

/// A fresh server and a plain fred client on it for inspecting state.
pub struct Env {
    pub server: RedisServer,
    pub admin: fred::clients::Client,
}

impl Env {
    pub async fn start() -> Env {
        let server = RedisServer::start().await;
        let admin = admin(&server.url()).await;
        Env { server, admin }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.server.url()).await.expect("connect")
    }

    pub async fn client_with_watchdog(&self, lease: Duration) -> Client {
        Client::builder(&self.server.url())
            .watchdog_timeout(lease)
            .connect()
            .await
            .expect("connect")
    }
}

pub async fn admin(url: &str) -> fred::clients::Client {
    let config = Config::from_url(url).expect("url");
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .set_policy(ReconnectPolicy::new_constant(0, 100))
        .build()
        .expect("build");
    client.init().await.expect("admin connect");
    client
}

/// The Redis key of lock `name` (mirrors redisync's naming for plain names).
pub fn lock_key(name: &str) -> String {
    format!("redisync:{{{name}}}")
}
