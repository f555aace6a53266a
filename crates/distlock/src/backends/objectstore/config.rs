//! `s3://` and `az://` URLs: which bucket or container, under which prefix, through which
//! endpoint and with which credentials; the `object_store` client they build.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use super::NAME;
use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, redact};

/// Which cloud's API the URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cloud {
    /// `s3://BUCKET`: Amazon S3 or an S3-compatible server (`?endpoint=`).
    S3,
    /// `az://CONTAINER`: Azure Blob Storage (or Azurite, `?endpoint=`).
    Azure,
}

/// An `s3://` or `az://` URL, read.
pub(super) struct ObjectStoreUrl {
    pub(super) cloud: Cloud,
    /// The bucket (S3) or container (Azure).
    pub(super) bucket: String,
    /// Where under the bucket the locks live (no slash at either end; may be empty).
    pub(super) prefix: String,
    /// `?endpoint=`: the server's address, for S3-compatibles and emulators.
    endpoint: Option<String>,
    /// `?region=` (S3 only).
    region: Option<String>,
    /// The user-info: S3's access key id and secret, Azure's account name and key.
    credentials: Option<(String, String)>,
}

/// The timeouts of one request, from [`crate::Options`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) response: Duration,
    pub(super) retry_for: Duration,
}

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidUrl, format!("{}: {why}", redact(url))).with_backend(NAME)
}

impl ObjectStoreUrl {
    /// Reads `s3://[KEY:SECRET@]BUCKET[/PREFIX][?endpoint=URL&region=R]` or
    /// `az://[ACCOUNT:KEY@]CONTAINER[/PREFIX][?endpoint=URL]`.
    pub(super) fn parse(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid(url, "expected s3://BUCKET or az://CONTAINER"))?;
        let cloud = match scheme.to_ascii_lowercase().as_str() {
            "s3" => Cloud::S3,
            "az" => Cloud::Azure,
            _ => return Err(invalid(url, "expected s3://BUCKET or az://CONTAINER")),
        };
        let parts = after_hosts(url).map_err(|why| invalid(url, why))?;
        // The bucket is what `after_hosts` skipped: between the user-info and the path.
        let authority_start = crate::url::userinfo_end(rest).map_or(0, |at| at + 1);
        let bucket: String = rest[authority_start..]
            .split(['/', '?'])
            .next()
            .unwrap_or("")
            .to_string();
        check_bucket(cloud, &bucket).map_err(|why| invalid(url, why))?;
        if parts.path.contains("//") {
            return Err(invalid(url, "an empty segment (//) in the prefix"));
        }
        let mut endpoint = None;
        let mut region = None;
        for (key, value) in parts.query {
            let value = crate::url::percent_decode(value)
                .ok_or_else(|| invalid(url, format!("a bad %-escape in ?{key}=")))?;
            match key {
                "endpoint" => {
                    if !(value.starts_with("http://") || value.starts_with("https://")) {
                        return Err(invalid(
                            url,
                            "?endpoint= must be an http:// or https:// address",
                        ));
                    }
                    endpoint = Some(value);
                }
                "region" if cloud == Cloud::S3 => region = Some(value),
                other => {
                    let known = match cloud {
                        Cloud::S3 => "endpoint, region",
                        Cloud::Azure => "endpoint",
                    };
                    return Err(invalid(
                        url,
                        format!("unknown parameter {other:?} (this scheme takes: {known})"),
                    ));
                }
            }
        }
        let credentials = match parts.user {
            Some((_, password)) if password.is_empty() => {
                return Err(invalid(
                    url,
                    match cloud {
                        Cloud::S3 => "credentials are ACCESS_KEY_ID:SECRET (the secret is missing)",
                        Cloud::Azure => "credentials are ACCOUNT:KEY (the key is missing)",
                    },
                ));
            }
            other => other,
        };
        Ok(ObjectStoreUrl {
            cloud,
            bucket,
            prefix: parts.path,
            endpoint,
            region,
            credentials,
        })
    }

    /// The client for this URL: settings from the environment as `object_store` reads them
    /// (`AWS_*`, `AZURE_*`), then the URL's on top. With it, when no credentials were given
    /// (so `object_store` will ask a cloud's instance metadata for them), what to do if the
    /// first request fails: off a cloud, that request fails in a way that names no credential.
    pub(super) fn build(
        &self,
        timeouts: Timeouts,
    ) -> Result<(Arc<dyn ObjectStore>, Option<&'static str>)> {
        let plain_http = self
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
        let client = ClientOptions::new()
            .with_connect_timeout(timeouts.connect)
            .with_timeout(timeouts.response)
            .with_allow_http(plain_http);
        // A lock request that cannot get through soon is better answered as an error the
        // core retries within the lease than retried here for minutes (object_store's default).
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: timeouts.retry_for,
        };
        let built = match self.cloud {
            Cloud::S3 => {
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(&self.bucket)
                    .with_client_options(client)
                    .with_retry(retry);
                if let Some(endpoint) = &self.endpoint {
                    b = b.with_endpoint(endpoint);
                }
                if let Some(region) = &self.region {
                    b = b.with_region(region);
                }
                if let Some((key, secret)) = &self.credentials {
                    b = b.with_access_key_id(key).with_secret_access_key(secret);
                }
                let given = |key| b.get_config_value(&key).is_some();
                let asks_instance = !(given(AmazonS3ConfigKey::AccessKeyId)
                    || given(AmazonS3ConfigKey::WebIdentityTokenFile)
                    || given(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
                    || given(AmazonS3ConfigKey::ContainerCredentialsFullUri)
                    || b.get_config_value(&AmazonS3ConfigKey::SkipSignature)
                        .is_some_and(|v| v == "true"));
                let hint = asks_instance.then_some(
                    "no credentials were given, so they were asked of the instance metadata \
                     service (EC2, ECS); put ACCESS_KEY_ID:SECRET@ before the bucket, or set \
                     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                );
                b.build()
                    .map(|s| (Arc::new(s) as Arc<dyn ObjectStore>, hint))
            }
            Cloud::Azure => {
                let mut b = MicrosoftAzureBuilder::from_env()
                    .with_container_name(&self.bucket)
                    .with_client_options(client)
                    .with_retry(retry);
                if let Some(endpoint) = &self.endpoint {
                    b = b.with_endpoint(endpoint.clone());
                }
                if let Some((account, key)) = &self.credentials {
                    b = b.with_account(account).with_access_key(key);
                }
                let given = |key| b.get_config_value(&key).is_some();
                let flag = |key| b.get_config_value(&key).is_some_and(|v| v == "true");
                let asks_instance = !(given(AzureConfigKey::AccessKey)
                    || given(AzureConfigKey::SasKey)
                    || given(AzureConfigKey::Token)
                    || given(AzureConfigKey::ClientSecret)
                    || given(AzureConfigKey::FederatedTokenFile)
                    || flag(AzureConfigKey::UseAzureCli)
                    || flag(AzureConfigKey::UseEmulator)
                    || flag(AzureConfigKey::SkipSignature));
                let hint = asks_instance.then_some(
                    "no account key was given, so credentials were asked of the managed \
                     identity endpoint; put ACCOUNT:KEY@ before the container, or set \
                     AZURE_STORAGE_ACCOUNT_KEY",
                );
                b.build()
                    .map(|s| (Arc::new(s) as Arc<dyn ObjectStore>, hint))
            }
        };
        built.map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!(
                    "cannot build the {} client: {} ({})",
                    match self.cloud {
                        Cloud::S3 => "S3",
                        Cloud::Azure => "Azure Blob",
                    },
                    crate::error::chain(&e),
                    match self.cloud {
                        Cloud::S3 => {
                            "credentials: s3://ACCESS_KEY_ID:SECRET@BUCKET, or AWS_ACCESS_KEY_ID \
                             and AWS_SECRET_ACCESS_KEY; region: ?region= or AWS_REGION"
                        }
                        Cloud::Azure => {
                            "account and key: az://ACCOUNT:KEY@CONTAINER, or \
                             AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY"
                        }
                    }
                ),
            )
            .with_backend(NAME)
        })
    }
}

/// The bucket (S3: 3–63 of a-z 0-9 . -) or container (Azure: 3–63 of a-z 0-9 -) rules, so a
/// typo fails here and not as a puzzling answer from the server.
fn check_bucket(cloud: Cloud, bucket: &str) -> std::result::Result<(), &'static str> {
    if bucket.is_empty() {
        return Err(match cloud {
            Cloud::S3 => "no bucket: expected s3://BUCKET[/PREFIX]",
            Cloud::Azure => "no container: expected az://CONTAINER[/PREFIX]",
        });
    }
    let allowed = |c: char| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (c == '.' && cloud == Cloud::S3)
    };
    if !(3..=63).contains(&bucket.len()) || !bucket.chars().all(allowed) {
        return Err(match cloud {
            Cloud::S3 => "a bucket name is 3 to 63 of a-z, 0-9, '.' and '-'",
            Cloud::Azure => "a container name is 3 to 63 of a-z, 0-9 and '-'",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bucket_prefix_endpoint_and_credentials() {
        let u = ObjectStoreUrl::parse(
            "s3://AK:s%2Fecret@locks/app/prod?endpoint=http://127.0.0.1:9000&region=eu-west-1",
        )
        .unwrap();
        assert_eq!(u.cloud, Cloud::S3);
        assert_eq!(u.bucket, "locks");
        assert_eq!(u.prefix, "app/prod");
        assert_eq!(u.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(u.region.as_deref(), Some("eu-west-1"));
        assert_eq!(
            u.credentials,
            Some(("AK".to_string(), "s/ecret".to_string()))
        );
        let u = ObjectStoreUrl::parse("az://locks").unwrap();
        assert_eq!((u.cloud, u.prefix.as_str()), (Cloud::Azure, ""));
        assert_eq!(u.credentials, None);
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for bad in [
            "s3://",
            "s3:///prefix",
            "s3://Upper",
            "s3://ab",
            "az://dots.not.allowed",
            "s3://locks?lease=5s",
            "az://locks?region=x",
            "s3://locks?endpoint=127.0.0.1:9000",
            "s3://key@locks",
            "s3://locks/a//b",
            "s3://locks#frag",
        ] {
            let e = ObjectStoreUrl::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{bad}");
        }
        let e = ObjectStoreUrl::parse("s3://AK:hunter2@locks?nope=1")
            .err()
            .unwrap();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
