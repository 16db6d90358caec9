//! Provider-neutral pieces of polling many units in few requests:
//!
//! - [`Round`]: requests of one round gathered with who asked for each, sent together, the
//!   answers handed back to their owners (one `send-batch`: single GETs of many units cost one
//!   round trip);
//! - [`ListPoll`]: the units of one collection looked for on the pages of its list endpoint
//!   (newest first), matched by provider job id, with the rules for when to stop paging and
//!   fall back to single queries;
//! - [`path_segment`]: ids percent-encoded into a URL path.

/// Calls of one round and who asked for each.
pub struct Round<O, C> {
    owners: Vec<O>,
    calls: Vec<C>,
}

impl<O, C> Default for Round<O, C> {
    fn default() -> Self {
        Round {
            owners: Vec::new(),
            calls: Vec::new(),
        }
    }
}

impl<O, C> Round<O, C> {
    /// An empty round.
    pub fn new() -> Round<O, C> {
        Round::default()
    }

    /// Add a call on behalf of `owner`.
    pub fn push(&mut self, owner: O, call: C) {
        self.owners.push(owner);
        self.calls.push(call);
    }

    /// Whether nothing is to be sent.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Send every call at once with `send` (one answer per call, in order) and pair each
    /// answer with its owner.
    pub fn send<A>(self, send: impl FnOnce(&[C]) -> Vec<A>) -> Vec<(O, A)> {
        let answers = send(&self.calls);
        self.owners.into_iter().zip(answers).collect()
    }
}

/// How a list endpoint is paged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListLimits {
    /// Pages read per tick before falling back to single queries.
    pub max_pages: u32,
    /// Smallest page asked for.
    pub page_size_min: u32,
    /// Entries per waiting unit (other jobs of the account are interleaved with ours).
    pub page_size_per_unit: u32,
    /// Largest page the endpoint accepts.
    pub page_size_max: u32,
    /// Tolerated skew between slotd's clock (`submitted-at-ms`) and the provider's (an entry's
    /// creation time): a page whose oldest entry is older than every waiting unit by more than
    /// this cannot be followed by a page holding them.
    pub clock_skew_ms: i64,
}

impl ListLimits {
    /// The page size for `units` waiting units.
    pub fn page_size(&self, units: usize) -> u32 {
        let wanted = u32::try_from(units)
            .unwrap_or(u32::MAX)
            .saturating_mul(self.page_size_per_unit);
        wanted
            .max(self.page_size_min)
            .min(self.page_size_max.max(1))
    }
}

/// A unit waiting to be found on a list page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The caller's index of the unit (e.g. its position in the batch).
    pub index: usize,
    /// The provider job id to look for.
    pub job_id: String,
    /// When the unit was submitted (slotd's clock), if known.
    pub submitted_at_ms: Option<u64>,
}

/// A readable entry of a list page.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<T> {
    /// The provider job id.
    pub job_id: String,
    /// When the provider created the job (its clock), if it says.
    pub created_at_ms: Option<i64>,
    /// The parsed entry, handed back for a unit found.
    pub item: T,
}

/// What one page settled.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing<T> {
    /// Units found, by index, with their entries.
    pub found: Vec<(usize, T)>,
    /// Units the list will not settle: poll them one by one.
    pub give_up: Vec<usize>,
}

/// Units of one collection being looked for on its list pages.
pub struct ListPoll {
    waiting: Vec<Waiting>,
    limits: ListLimits,
    page: u32,
    page_size: u32,
    done: bool,
}

impl ListPoll {
    /// Look for `waiting`, starting at page 1.
    pub fn new(waiting: Vec<Waiting>, limits: ListLimits) -> ListPoll {
        let page_size = limits.page_size(waiting.len());
        ListPoll {
            waiting,
            limits,
            page: 1,
            page_size,
            done: false,
        }
    }

    /// The next page to ask for as `(page number from 1, page size)`, if any.
    pub fn next_page(&self) -> Option<(u32, u32)> {
        (!self.done && !self.waiting.is_empty()).then_some((self.page, self.page_size))
    }

    /// Take in the answer to the last page: `None` for a failed or unreadable page (every
    /// waiting unit falls back to single queries); otherwise the page's length (unreadable
    /// entries included) and its readable entries.
    pub fn absorb<T>(&mut self, page: Option<(usize, Vec<Entry<T>>)>) -> Listing<T> {
        let Some((len, entries)) = page else {
            return self.give_up(Vec::new());
        };
        let mut found = Vec::new();
        let mut oldest: Option<i64> = None;
        for entry in entries {
            if let Some(t) = entry.created_at_ms {
                oldest = Some(oldest.map_or(t, |o| o.min(t)));
            }
            if let Some(pos) = self.waiting.iter().position(|w| w.job_id == entry.job_id) {
                found.push((self.waiting.swap_remove(pos).index, entry.item));
            }
        }
        if self.waiting.is_empty() {
            self.done = true;
            return Listing {
                found,
                give_up: Vec::new(),
            };
        }
        let last_page = len < self.page_size as usize;
        let newest_waiting = self
            .waiting
            .iter()
            .filter_map(|w| w.submitted_at_ms)
            .filter_map(|t| i64::try_from(t).ok())
            .max();
        let past_them = match (oldest, newest_waiting) {
            (Some(o), Some(n)) => o < n.saturating_sub(self.limits.clock_skew_ms),
            _ => false,
        };
        if last_page || past_them || self.page >= self.limits.max_pages {
            return self.give_up(found);
        }
        self.page += 1;
        Listing {
            found,
            give_up: Vec::new(),
        }
    }

    fn give_up<T>(&mut self, found: Vec<(usize, T)>) -> Listing<T> {
        self.done = true;
        let give_up = self.waiting.drain(..).map(|w| w.index).collect();
        Listing { found, give_up }
    }
}

/// Percent-encode a path segment (ids are normally URL-safe already).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "polling_tests.rs"]
mod tests;
