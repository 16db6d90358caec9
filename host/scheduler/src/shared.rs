//! Pools on a shared provider account (docs/accounts-deadlines-budgets.md "One account, many
//! pools"): what the account leaves a pool's slot set now, the flag that tells the other
//! members' grants this pool has work waiting (so its unmet `min` is kept free for it), and
//! the wake of a waiting member once the account has room for it.

use slotd_pools::pool_state::{AccountShare, PoolLimit};

use super::Scheduler;
use super::error::SchedulerError;

/// How long a waiting flag holds without renewal: a scheduler that stops ticking (a crash)
/// stops holding the other members' slots after this.
const WAITING_TTL_MS: i64 = 30_000;

impl Scheduler {
    /// New slots the shared account lets `share`'s slot set take now (the slot store applies
    /// the same rule again, atomically, when it grants).
    pub(super) async fn shared_room(
        &self,
        share: &AccountShare,
        now: i64,
    ) -> Result<u32, SchedulerError> {
        let (used, waiting) = self.shared_state(share, now).await?;
        Ok(share.account.room(share.this, &used, &waiting))
    }

    /// Each member's slots in use and whether it has work waiting, in member order.
    async fn shared_state(
        &self,
        share: &AccountShare,
        now: i64,
    ) -> Result<(Vec<u32>, Vec<bool>), SchedulerError> {
        let a = &share.account;
        let sets: Vec<(&str, &str)> = a
            .members
            .iter()
            .map(|m| (m.pool.as_str(), m.key.as_str()))
            .collect();
        let used = self.slots_used_many(&sets).await?;
        let flags = self.services.slots.waiting(&a.name).await?;
        Ok((used, a.waiting_now(&flags, now)))
    }

    /// Keep the pool's waiting flags on its shared accounts as its fill left them: set (and
    /// renewed before it lapses) while units wait for a slot, cleared when none does. Written
    /// only when that changes or the flag needs renewing.
    pub(super) async fn note_waiting(&self, limit: &PoolLimit, waiting: bool, now: i64) {
        for a in &limit.accounts {
            let Some(share) = &a.share else { continue };
            let key = a.slot_key(&limit.name);
            let noted = self.waiting_noted.lock().get(&key).copied();
            let until = if waiting {
                match noted {
                    Some(u) if u > now.saturating_add(WAITING_TTL_MS / 2) => continue,
                    _ => now.saturating_add(WAITING_TTL_MS),
                }
            } else {
                match noted {
                    Some(0) => continue,
                    _ => 0,
                }
            };
            match self
                .services
                .slots
                .set_waiting(&share.account.name, &key, until)
                .await
            {
                Ok(()) => {
                    self.waiting_noted.lock().insert(key, until);
                }
                Err(e) => {
                    tracing::warn!(pool = %limit.name, error = %e, "could not flag the pool's waiting work on its shared account");
                }
            }
        }
    }

    /// Wake the other pools of the shared accounts this pool is on that have work waiting
    /// and room on the account now (a slot this pool freed, or one it may not take back).
    pub(super) async fn wake_waiting_members(&self, limit: &PoolLimit, now: i64) {
        for a in &limit.accounts {
            let Some(share) = &a.share else { continue };
            let Ok((used, waiting)) = self.shared_state(share, now).await else {
                continue;
            };
            for (i, m) in share.account.members.iter().enumerate() {
                if i != share.this
                    && waiting.get(i).copied().unwrap_or(false)
                    && share.account.room(i, &used, &waiting) > 0
                {
                    self.services.wake.pool(&m.pool);
                }
            }
        }
    }
}
