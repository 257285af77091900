//! Secrets never leave through the REST API: connector options whose key
//! names a secret are shown as `******`, in option maps and in the SQL text
//! of pipelines.

use regex::Regex;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// What a redacted value reads as.
pub const REDACTED: &str = "******";

/// An option key containing one of these (case-insensitive) holds a secret.
pub const SECRET_KEY_PARTS: [&str; 6] = ["password", "secret", "sasl", "ssl.key", "token", "credential"];

/// True when option `key` holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEY_PARTS.iter().any(|part| key.contains(part))
}

/// `options` with secret values replaced.
pub fn redact_options(options: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    options
        .iter()
        .map(|(k, v)| {
            let v = if is_secret_key(k) {
                REDACTED.to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// `key = 'value'` pairs (key quoted or not) in SQL text.
static OPTION_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?P<key>'(?:[^']|'')*'|"(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_.]*)(?P<eq>\s*=\s*)'(?:[^']|'')*'"#)
        .expect("valid regex")
});

/// `sql` with the values of secret options replaced (over-redacting a
/// comparison such as `password = 'x'` in a WHERE clause is fine).
pub fn redact_sql(sql: &str) -> String {
    OPTION_PAIR
        .replace_all(sql, |caps: &regex::Captures<'_>| {
            let key = &caps["key"];
            let bare = key.trim_matches(|c| c == '\'' || c == '"');
            if is_secret_key(bare) {
                format!("{key}{}'{REDACTED}'", &caps["eq"])
            } else {
                caps[0].to_string()
            }
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_recognised_by_their_parts() {
        for key in [
            "password",
            "properties.sasl.password",
            "properties.sasl.mechanism",
            "ssl.key.location",
            "aws.secret.access.key",
            "API_TOKEN",
            "gcs.credentials",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in [
            "connector",
            "topic",
            "properties.bootstrap.servers",
            "path",
            "ssl.truststore.type",
        ] {
            assert!(!is_secret_key(key), "{key}");
        }
    }

    #[test]
    fn option_maps_keep_their_keys_and_lose_secret_values() {
        let options: BTreeMap<String, String> = [("topic", "bids"), ("properties.sasl.password", "hunter2")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let redacted = redact_options(&options);
        assert_eq!(redacted["topic"], "bids");
        assert_eq!(redacted["properties.sasl.password"], REDACTED);
    }

    #[test]
    fn sql_text_loses_secret_values_in_every_quoting() {
        let sql = "CREATE SINK k WITH ('connector' = 'kafka', 'properties.sasl.password' = 'it''s secret', \
                   token='abc', \"ssl.key.password\" = 'x') AS SELECT a FROM t WHERE note = 'password'";
        let out = redact_sql(sql);
        assert!(
            !out.contains("it''s secret") && !out.contains("abc") && !out.contains("'x'"),
            "{out}"
        );
        assert!(out.contains("'properties.sasl.password' = '******'"), "{out}");
        assert!(out.contains("token='******'"), "{out}");
        assert!(out.contains("'connector' = 'kafka'"), "{out}");
        assert!(out.contains("WHERE note = 'password'"), "{out}");
    }
}
