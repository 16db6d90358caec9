//! Polling several units of one collection through its list endpoint
//! (`GET {collection}?pageNum=P&pageSize=S`, newest first): one request answers for every
//! unit found on the page, compared by `task_id`. Pages are read while they can still hold a
//! waiting unit, up to [`MAX_PAGES`]; units not found by then are polled by single queries.
//!
//! The page is larger than the number of units due ([`page_size`]) because other tasks of the
//! account (finished ones, other tenants', other pools') are interleaved with ours.

use serde_json::Value;

use crate::answer::Problem;
use crate::client::Call;
use crate::flow::Job;
use crate::task::TaskObject;

/// Pages read per collection and tick before falling back to single queries.
pub const MAX_PAGES: u32 = 3;
/// Smallest page asked for.
pub const PAGE_SIZE_MIN: u32 = 50;
/// Pages hold this many entries per unit due (other tasks are interleaved with ours).
pub const PAGE_SIZE_PER_UNIT: u32 = 4;
/// Tolerance between slotd's clock (`submitted-at-ms`) and Kling's (`created_at`): a page
/// whose oldest task is older than every waiting unit by more than this cannot be followed by
/// a page holding them.
pub const CLOCK_SKEW_MS: i64 = 10 * 60 * 1000;

/// The units of one collection waiting for list pages.
pub struct ListState {
    waiting: Vec<usize>,
    page: u32,
    page_size: u32,
    done: bool,
}

/// What one page settled.
pub struct Listing {
    /// Units found on the page, with their task objects.
    pub found: Vec<(usize, TaskObject)>,
    /// Units the list will not settle: poll them one by one.
    pub give_up: Vec<usize>,
}

/// The page size for `units` waiting units, within the collection's maximum.
pub fn page_size(units: usize, max: u32) -> u32 {
    let wanted = u32::try_from(units)
        .unwrap_or(u32::MAX)
        .saturating_mul(PAGE_SIZE_PER_UNIT);
    wanted.max(PAGE_SIZE_MIN).min(max.max(1))
}

impl ListState {
    pub fn new(waiting: Vec<usize>, page_size_max: u32) -> ListState {
        let page_size = page_size(waiting.len(), page_size_max);
        ListState {
            waiting,
            page: 1,
            page_size,
            done: false,
        }
    }

    /// The next page to ask for, if any.
    pub fn call(&self, collection: &str) -> Option<Call> {
        (!self.done && !self.waiting.is_empty()).then(|| {
            Call::Get(format!(
                "{collection}?pageNum={}&pageSize={}",
                self.page, self.page_size
            ))
        })
    }

    /// Take in the answer to the last page.
    pub fn absorb(&mut self, answer: Result<Value, Problem>, jobs: &[Job<'_>]) -> Listing {
        let entries = match answer {
            Ok(Value::Array(entries)) => entries,
            // A failed or malformed page: single queries decide each unit on its own.
            _ => return self.give_up(Vec::new()),
        };
        let mut found = Vec::new();
        let mut oldest: Option<i64> = None;
        for entry in &entries {
            let Ok(task) = TaskObject::parse(entry) else {
                continue;
            };
            if let Some(t) = task.created_at_ms {
                oldest = Some(oldest.map_or(t, |o| o.min(t)));
            }
            let mine = self
                .waiting
                .iter()
                .position(|&i| jobs[i].unit.job_id.as_deref() == Some(task.task_id.as_str()));
            if let Some(pos) = mine {
                found.push((self.waiting.swap_remove(pos), task));
            }
        }
        if self.waiting.is_empty() {
            self.done = true;
            return Listing {
                found,
                give_up: Vec::new(),
            };
        }
        let last_page = entries.len() < self.page_size as usize;
        let newest_waiting = self
            .waiting
            .iter()
            .filter_map(|&i| jobs[i].unit.submitted_at_ms)
            .filter_map(|t| i64::try_from(t).ok())
            .max();
        let past_them = match (oldest, newest_waiting) {
            (Some(o), Some(n)) => o < n.saturating_sub(CLOCK_SKEW_MS),
            _ => false,
        };
        if last_page || past_them || self.page >= MAX_PAGES {
            return self.give_up(found);
        }
        self.page += 1;
        Listing {
            found,
            give_up: Vec::new(),
        }
    }

    fn give_up(&mut self, found: Vec<(usize, TaskObject)>) -> Listing {
        self.done = true;
        Listing {
            found,
            give_up: std::mem::take(&mut self.waiting),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_grow_with_the_units_due_within_the_maximum() {
        assert_eq!(page_size(2, 500), PAGE_SIZE_MIN);
        assert_eq!(page_size(18, 500), 72);
        assert_eq!(page_size(400, 500), 500);
        assert_eq!(page_size(400, 1000), 1000);
    }
}
