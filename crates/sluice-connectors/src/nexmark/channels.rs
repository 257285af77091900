//! The channel URL table of bids: channel names and their URLs, derived
//! from the seed and built on first use.

use super::random::{DOMAIN_CHANNEL, EventRng};
use super::strings::push_string;

/// A bid comes through a hot channel with probability `1 - 1/HOT_CHANNEL_ODDS`.
pub(super) const HOT_CHANNEL_ODDS: u64 = 2;
pub(super) const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// Number of other channels, `channel-0` to `channel-9999`; also the bound of
/// the URL table.
pub(super) const CHANNELS: usize = 10_000;
/// A non-hot channel's URL carries a `channel_id` with probability
/// `1 - 1/CHANNEL_ID_ODDS`.
pub(super) const CHANNEL_ID_ODDS: u64 = 10;

/// Appends a random item URL, `https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1`.
fn push_base_url(rng: &mut EventRng, out: &mut String) {
    out.push_str("https://www.nexmark.com/");
    for _ in 0..3 {
        push_string(rng, 5, '_', out);
        out.push('/');
    }
    out.push_str("item.htm?query=1");
}

/// Marks a channel whose name and URL are not built yet.
const UNBUILT: u32 = u32::MAX;

/// The channel names and URLs bids come through. The reference draws them
/// once per process; here each is a pure function of the seed and the channel
/// number, built the first time it is used, so every partition agrees.
pub(super) struct ChannelUrls {
    seed: u64,
    /// URL of each hot channel; empty until first used.
    hot_urls: Vec<String>,
    /// Names and URLs of the other channels back to back, in the order they
    /// were first used (one allocation, so lookups touch little memory).
    text: String,
    /// Per channel number: where in `text` its name starts, where its URL
    /// starts and where that ends; `UNBUILT` until first used. Empty until
    /// any is used, then exactly [`CHANNELS`] long.
    spans: Vec<[u32; 3]>,
}

impl ChannelUrls {
    pub(super) fn new(seed: u64) -> Self {
        ChannelUrls {
            seed,
            hot_urls: Vec::new(),
            text: String::new(),
            spans: Vec::new(),
        }
    }

    pub(super) fn hot(&mut self, index: usize) -> (&'static str, &str) {
        if self.hot_urls.is_empty() {
            let seed = self.seed;
            self.hot_urls = (0..HOT_CHANNELS.len())
                .map(|i| {
                    let mut rng = EventRng::for_key(seed, DOMAIN_CHANNEL, (CHANNELS + i) as u64);
                    let mut url = String::new();
                    push_base_url(&mut rng, &mut url);
                    url
                })
                .collect();
        }
        (HOT_CHANNELS[index], &self.hot_urls[index])
    }

    pub(super) fn other(&mut self, number: usize) -> (&str, &str) {
        if self.spans.is_empty() {
            self.spans = vec![[UNBUILT; 3]; CHANNELS];
        }
        if self.spans[number][0] == UNBUILT {
            self.spans[number] = self.build_other(number);
        }
        let [name_start, url_start, url_end] = self.spans[number].map(|i| i as usize);
        (&self.text[name_start..url_start], &self.text[url_start..url_end])
    }

    /// Appends channel `number`'s name and URL to `text`; returns their span.
    fn build_other(&mut self, number: usize) -> [u32; 3] {
        use std::fmt::Write;
        let name_start = self.text.len();
        write!(self.text, "channel-{number}").expect("writing to a String cannot fail");
        let url_start = self.text.len();
        let mut rng = EventRng::for_key(self.seed, DOMAIN_CHANNEL, number as u64);
        push_base_url(&mut rng, &mut self.text);
        if rng.below(CHANNEL_ID_ODDS) > 0 {
            // As the reference: Math.abs(Integer.reverse(number)).
            let id = (number as i32).reverse_bits().wrapping_abs();
            write!(self.text, "&channel_id={id}").expect("writing to a String cannot fail");
        }
        [name_start, url_start, self.text.len()]
            .map(|i| u32::try_from(i).expect("the channel table is far below 4 GiB"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_urls_are_a_function_of_seed_and_number() {
        let mut first = ChannelUrls::new(5);
        let mut second = ChannelUrls::new(5);
        // Fill in a different order: the entries must not depend on it.
        let late: Vec<String> = (0..20).rev().map(|i| second.other(i).1.to_owned()).collect();
        for (i, url) in (0..20).rev().zip(&late) {
            assert_eq!(first.other(i).1, url.as_str());
        }
        assert_eq!(first.other(42).0, "channel-42");
        assert_eq!(first.hot(1).0, "Facebook");
        assert_eq!(first.hot(1).1, second.hot(1).1);
        assert_ne!(ChannelUrls::new(6).hot(1).1, first.hot(1).1);
    }

    #[test]
    fn urls_have_the_reference_shape() {
        let mut channels = ChannelUrls::new(0);
        let with_id = (0..1_000)
            .filter(|&i| channels.other(i).1.contains("&channel_id="))
            .count();
        // Expected 900 of 1000.
        assert!((850..950).contains(&with_id), "{with_id}");
        let url = channels.hot(0).1;
        assert!(url.starts_with("https://www.nexmark.com/"), "{url}");
        assert!(url.ends_with("/item.htm?query=1"), "{url}");
        assert_eq!(url.matches('/').count(), 6, "{url}");
        // Number 1 reverses to i32::MIN, whose Java abs stays negative.
        let one = channels.other(1).1.to_owned();
        assert!(
            !one.contains("&channel_id=") || one.ends_with("&channel_id=-2147483648"),
            "{one}"
        );
    }
}
