//! The seeded command generator of the Redis series ([`Workload`]): the keys of an
//! application's cache and session store, and each version's updates, inserts and deletes
//! (see the parent module for the series and the server they are sent to).

use super::RedisParams;
use crate::rng::Rng;

/// One command: its name and arguments.
pub type Cmd = Vec<String>;

/// The kinds of keys of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `sess:<hex>`: a hash, with an expiry.
    Session,
    /// `user:<n>`: a hash.
    User,
    /// `page:<path>`: a string (a cached HTML fragment), with an expiry.
    Page,
    /// `cnt:<what>:<n>`: an integer string.
    Counter,
    /// `feed:<n>`: a list of the latest events (at most [`FEED_LEN`]).
    Feed,
    /// `tags:<n>`: a set.
    Tags,
    /// `lb:<n>`: a sorted set.
    Board,
}

/// Kinds of version 0 and of inserts, with their weights in percent.
const INITIAL_MIX: [(Kind, u64); 7] = [
    (Kind::Session, 35),
    (Kind::User, 20),
    (Kind::Page, 20),
    (Kind::Counter, 10),
    (Kind::Feed, 7),
    (Kind::Tags, 5),
    (Kind::Board, 3),
];
const INSERT_MIX: [(Kind, u64); 5] = [
    (Kind::Session, 50),
    (Kind::Page, 30),
    (Kind::User, 10),
    (Kind::Feed, 5),
    (Kind::Counter, 5),
];

/// Events a feed keeps (`LTRIM`).
const FEED_LEN: u64 = 50;
/// Day 0 of the workload's clock (2025-10-09), a fixed number so the data is deterministic.
const EPOCH: u64 = 1_760_000_000;
/// Expiry times are in 2036, so that no key expires while a series is generated.
const EXPIRE_AT: u64 = 2_100_000_000;

const WORDS: &[&str] = &[
    "account",
    "order",
    "cart",
    "checkout",
    "product",
    "review",
    "shipping",
    "delivered",
    "pending",
    "paid",
    "refund",
    "invoice",
    "customer",
    "support",
    "ticket",
    "priority",
    "widget",
    "gadget",
    "premium",
    "basic",
    "discount",
    "coupon",
    "summer",
    "winter",
    "blue",
    "red",
    "green",
    "large",
    "small",
    "available",
    "stock",
    "warehouse",
    "north",
    "south",
    "east",
    "west",
    "city",
    "street",
    "review",
    "rating",
    "comment",
    "photo",
    "video",
    "share",
];
const AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:119.0) Gecko/20100101 Firefox/119.0",
    "okhttp/4.11.0",
    "MyShopApp/3.2.1 (Android 14)",
];
const PLANS: &[&str] = &["free", "basic", "pro", "team", "enterprise"];
const COUNTRIES: &[&str] = &["de", "fr", "us", "gb", "jp", "br", "in", "es", "it", "nl"];
const EVENTS: &[&str] = &["login", "view", "like", "comment", "purchase", "follow"];

/// One live key.
#[derive(Clone, Debug)]
struct Key {
    kind: Kind,
    name: String,
    /// The seed of a page's fixed text (its template), so that an update changes the
    /// numbers in it and keeps the words, as a re-rendered page does.
    template: u64,
}

/// The seeded command generator: the store's live keys and the random stream.
#[derive(Clone, Debug)]
pub struct Workload {
    params: RedisParams,
    rng: Rng,
    live: Vec<Key>,
    next_id: u64,
    version: usize,
}

fn pick<'a>(rng: &mut Rng, list: &[&'a str]) -> &'a str {
    list[rng.below(list.len() as u64) as usize]
}

fn hex(rng: &mut Rng, chars: usize) -> String {
    let mut s = String::with_capacity(chars + 16);
    while s.len() < chars {
        s.push_str(&format!("{:016x}", rng.next_u64()));
    }
    s.truncate(chars);
    s
}

fn weighted(rng: &mut Rng, mix: &[(Kind, u64)]) -> Kind {
    let total: u64 = mix.iter().map(|(_, w)| w).sum();
    let mut x = rng.below(total);
    for &(k, w) in mix {
        if x < w {
            return k;
        }
        x -= w;
    }
    mix[0].0
}

pub(super) fn cmd(parts: &[&str]) -> Cmd {
    parts.iter().map(|s| (*s).to_string()).collect()
}

impl Workload {
    /// The generator of a series.
    pub fn new(params: &RedisParams) -> Self {
        Workload {
            params: params.clone(),
            rng: Rng::new(params.seed),
            live: Vec::new(),
            next_id: 1,
            version: 0,
        }
    }

    /// Keys the store holds after the commands generated so far (what `DBSIZE` must say).
    pub fn live_keys(&self) -> usize {
        self.live.len()
    }

    /// The commands of the next version: the initial load for version 0, else updates,
    /// deletes and inserts (in that order; a key is deleted only if it is live, and inserted
    /// keys have names never used before).
    pub fn next_version(&mut self) -> Vec<Cmd> {
        let mut out = Vec::new();
        if self.version == 0 {
            for _ in 0..self.params.keys {
                let kind = weighted(&mut self.rng, &INITIAL_MIX);
                self.insert(kind, &mut out);
            }
        } else {
            let n = self.live.len();
            for _ in 0..(n as f64 * self.params.update) as usize {
                let i = self.rng.below(self.live.len() as u64) as usize;
                self.update(i, &mut out);
            }
            for _ in 0..(n as f64 * self.params.delete) as usize {
                if self.live.len() > 1 {
                    let i = self.rng.below(self.live.len() as u64) as usize;
                    let key = self.live.swap_remove(i);
                    out.push(cmd(&["DEL", &key.name]));
                }
            }
            for _ in 0..(n as f64 * self.params.insert) as usize {
                let kind = weighted(&mut self.rng, &INSERT_MIX);
                self.insert(kind, &mut out);
            }
        }
        self.version += 1;
        out
    }

    /// A time of the current version's day (seconds since the Unix epoch).
    fn now(&mut self) -> String {
        (EPOCH + self.version as u64 * 86_400 + self.rng.below(86_400)).to_string()
    }

    fn expire_at(&mut self) -> String {
        (EXPIRE_AT + self.rng.below(30 * 86_400)).to_string()
    }

    fn user_ref(&mut self) -> String {
        self.rng.below(self.next_id.max(2)).to_string()
    }

    pub(super) fn page_text(&mut self, template: u64) -> String {
        // The words come from the page's own template, the numbers from the workload: an
        // update re-renders the same page with other prices, counts and times.
        let mut t = Rng::new(template);
        let n = t.range(20, 180);
        let mut s = String::from("<div class=\"page\">");
        for i in 0..n {
            if i % 9 == 8 {
                s.push_str(&format!(" <b>{}</b>", self.rng.below(100_000)));
            } else {
                s.push(' ');
                s.push_str(pick(&mut t, WORDS));
            }
        }
        s.push_str("</div>");
        s
    }

    fn cart(&mut self) -> String {
        let items = self.rng.below(4);
        let list: Vec<String> = (0..items)
            .map(|_| {
                format!(
                    "{{\"sku\":{},\"qty\":{}}}",
                    self.rng.below(50_000),
                    self.rng.range(1, 5)
                )
            })
            .collect();
        format!("[{}]", list.join(","))
    }

    fn event(&mut self) -> String {
        let e = pick(&mut self.rng, EVENTS);
        let at = self.now();
        format!("{e}:{}:{at}", self.rng.below(1_000_000))
    }

    fn insert(&mut self, kind: Kind, out: &mut Vec<Cmd>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut template = 0;
        let name = match kind {
            Kind::Session => {
                let name = format!("sess:{}", hex(&mut self.rng, 32));
                let (user, created, seen, ip, ua, csrf, cart) = (
                    self.user_ref(),
                    self.now(),
                    self.now(),
                    format!(
                        "10.{}.{}.{}",
                        self.rng.below(256),
                        self.rng.below(256),
                        self.rng.below(256)
                    ),
                    pick(&mut self.rng, AGENTS),
                    hex(&mut self.rng, 32),
                    self.cart(),
                );
                out.push(cmd(&[
                    "HSET",
                    &name,
                    "user_id",
                    &user,
                    "created",
                    &created,
                    "last_seen",
                    &seen,
                    "ip",
                    &ip,
                    "ua",
                    ua,
                    "csrf",
                    &csrf,
                    "cart",
                    &cart,
                ]));
                let at = self.expire_at();
                out.push(cmd(&["EXPIREAT", &name, &at]));
                name
            }
            Kind::User => {
                let name = format!("user:{id}");
                let first = pick(&mut self.rng, WORDS);
                let (created, last, logins) =
                    (self.now(), self.now(), self.rng.below(500).to_string());
                let (plan, country) = (pick(&mut self.rng, PLANS), pick(&mut self.rng, COUNTRIES));
                out.push(cmd(&[
                    "HSET",
                    &name,
                    "name",
                    &format!("{first} {id}"),
                    "email",
                    &format!("{first}.{id}@example.com"),
                    "plan",
                    plan,
                    "country",
                    country,
                    "created",
                    &created,
                    "last_login",
                    &last,
                    "logins",
                    &logins,
                ]));
                name
            }
            Kind::Page => {
                let name = format!(
                    "page:/{}/{}/{id}",
                    pick(&mut self.rng, WORDS),
                    pick(&mut self.rng, WORDS)
                );
                template = self.rng.next_u64();
                let text = self.page_text(template);
                out.push(cmd(&["SET", &name, &text]));
                let at = self.expire_at();
                out.push(cmd(&["EXPIREAT", &name, &at]));
                name
            }
            Kind::Counter => {
                let name = format!("cnt:{}:{id}", pick(&mut self.rng, WORDS));
                let n = self.rng.below(1_000_000).to_string();
                out.push(cmd(&["SET", &name, &n]));
                name
            }
            Kind::Feed => {
                let name = format!("feed:{id}");
                let n = self.rng.range(5, FEED_LEN);
                let mut c = cmd(&["RPUSH", &name]);
                for _ in 0..n {
                    c.push(self.event());
                }
                out.push(c);
                name
            }
            Kind::Tags => {
                let name = format!("tags:{id}");
                let n = self.rng.range(3, 15);
                let mut c = cmd(&["SADD", &name]);
                for _ in 0..n {
                    c.push(pick(&mut self.rng, WORDS).into());
                }
                out.push(c);
                name
            }
            Kind::Board => {
                let name = format!("lb:{id}");
                let n = self.rng.range(10, 100);
                let mut c = cmd(&["ZADD", &name]);
                for _ in 0..n {
                    c.push(self.rng.below(100_000).to_string());
                    c.push(format!("user:{}", self.user_ref()));
                }
                out.push(c);
                name
            }
        };
        self.live.push(Key {
            kind,
            name,
            template,
        });
    }

    fn update(&mut self, i: usize, out: &mut Vec<Cmd>) {
        let key = self.live[i].clone();
        let name = key.name.as_str();
        match key.kind {
            Kind::Session => {
                let seen = self.now();
                let mut c = cmd(&["HSET", name, "last_seen", &seen]);
                if self.rng.chance(0.5) {
                    c.push("cart".into());
                    c.push(self.cart());
                }
                out.push(c);
                // A sliding expiry: every request extends the session.
                let at = self.expire_at();
                out.push(cmd(&["EXPIREAT", name, &at]));
            }
            Kind::User => {
                let last = self.now();
                out.push(cmd(&["HSET", name, "last_login", &last]));
                out.push(cmd(&["HINCRBY", name, "logins", "1"]));
            }
            Kind::Page => {
                let text = self.page_text(key.template);
                out.push(cmd(&["SET", name, &text]));
                let at = self.expire_at();
                out.push(cmd(&["EXPIREAT", name, &at]));
            }
            Kind::Counter => {
                let by = self.rng.range(1, 100).to_string();
                out.push(cmd(&["INCRBY", name, &by]));
            }
            Kind::Feed => {
                let e = self.event();
                out.push(cmd(&["LPUSH", name, &e]));
                out.push(cmd(&["LTRIM", name, "0", &(FEED_LEN - 1).to_string()]));
            }
            Kind::Tags => {
                let t = pick(&mut self.rng, WORDS);
                out.push(cmd(&["SADD", name, t]));
            }
            Kind::Board => {
                let (by, who) = (
                    self.rng.range(1, 500).to_string(),
                    format!("user:{}", self.user_ref()),
                );
                out.push(cmd(&["ZINCRBY", name, &by, &who]));
            }
        }
    }
}
