//! The `kling-avatar` component: exports `kling_common::KlingAvatar` (an avatar clone as one
//! unit in two stages, voice then element, on the `kling:avatar` pool).

use kling_common::KlingAvatar;

slotd_sdk::export_handler!(KlingAvatar);
