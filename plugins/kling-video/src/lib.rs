//! The `kling-video` component: exports `kling_common::KlingVideo` (Kling text-to-video and
//! image-to-video, one unit per shot on the `kling:video` pool). Built twice: `kling-video`
//! (version 1.0.0) and `kling-video-next` (same source, feature `next`, version 1.1.0), so
//! reload tests can alternate two real versions against the simulator.

#[cfg(not(feature = "next"))]
type KlingVideo = kling_common::KlingVideo<false>;
#[cfg(feature = "next")]
type KlingVideo = kling_common::KlingVideo<true>;

slotd_sdk::export_handler!(KlingVideo);
