//! A process's handle on a shared mapping: the header, the configuration, the participants
//! table with its leases, the watchdog and the re-attach after `fork`, for any buffer family
//! that can live in a mapping ([`Family`]: the flat buffer, the sequence buffer).

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64 as StdAtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::os;
use crate::buffer::reservations::{Entry, MAX_PARTICIPANTS};
use crate::error::{Error, Result};
use crate::region::{Mapping, Region, RegionBuf};

/// The mapping's format; bumped whenever the layout changes in a way the hash does not see.
const VERSION: u32 = 6;
/// Where the configuration starts, and the most bytes it may take.
const CONFIG_OFFSET: usize = 4096;
const CONFIG_MAX: usize = 60 * 1024;
/// Where the region starts.
const REGION_OFFSET: usize = 64 * 1024;
/// The header's ready flag once the creator is done.
const READY: u64 = 0x5245_4144_595f_4b52;
/// How long an attacher waits for a creator still initializing the mapping.
const CREATION_WAIT: Duration = Duration::from_secs(5);

/// How often each handle's watchdog looks for dead participants: the bound, plus the
/// recovery itself, on how long a live process waits for what a dead one held.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(10);

/// A buffer family that can live in a shared mapping: how it is described, built from a
/// region, joined by a participant, and recovered after a participant's death.
pub(crate) trait Family: Send + Sync + Sized + 'static {
    /// Its configuration.
    type Config;
    /// The first bytes of its mappings (each family its own, so that one family's attach
    /// refuses another's mapping by name).
    const MAGIC: [u8; 8];
    /// What its mappings hold, for messages ("shared buffer", "shared sequence buffer").
    const WHAT: &'static str;
    /// The configuration with its key tag drawn (as the heap buffer's constructor does).
    fn prepare(config: Self::Config) -> Self::Config;
    /// The configuration as JSON, kept in the mapping for attachers.
    fn config_json(config: &Self::Config) -> String;
    /// The configuration from its JSON (`label` names the mapping in errors).
    fn config_from_json(json: &[u8], label: &str) -> Result<Self::Config>;
    /// The buffer over `region` (after the participants table): the same allocations in the
    /// same order in every process.
    fn build(config: &Self::Config, region: &mut Region) -> Result<Self>;
    /// Sizes of this build's shared structures, which enter the layout hash.
    fn layout_sizes() -> Vec<usize>;
    /// Run as participant `me` of a mapping (optimistic readers, owners in state words,
    /// records in `table`).
    fn join(&mut self, me: usize, table: &Arc<RegionBuf<Entry>>);
    /// Recover the participants `dead` (their leases held by the caller): everything they
    /// held. `false` when it could not finish now (the caller tries again later).
    fn recover(&self, table: &[Entry], dead: &[usize]) -> bool;
}

/// The first bytes of the mapping.
#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    _pad: u32,
    /// Hash of the configuration and of this build's layout (`layout_hash`).
    layout: u64,
    /// Bytes of the whole mapping.
    total: u64,
    /// Bytes of the configuration's JSON at `CONFIG_OFFSET`.
    config_len: u64,
    /// `READY` once everything else is written (Release).
    ready: StdAtomicU64,
    /// Participants recovered so far (statistics).
    recovered: StdAtomicU64,
}

/// A live participant of a shared buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Participant {
    /// Its entry in the table (its owner number in state words is `index + 1`).
    pub index: usize,
    /// Its process id, as it recorded it.
    pub pid: u32,
    /// Whether it is the handle this was asked through.
    pub this_handle: bool,
}

/// One process's handle on a mapping of family `F` (the state of [`crate::ShmBuffer`] and
/// of the shared sequence buffer).
pub(crate) struct Handle<F: Family> {
    /// The handle's state (`Arc::into_raw`). In a child after `fork` it is replaced, on
    /// first use, by a fresh attach; the parent's copy is leaked there (dropping it would
    /// join a watchdog thread the child does not have), so references to it that a thread
    /// still holds stay valid.
    current: AtomicPtr<Inner<F>>,
    /// One re-attach at a time.
    reattach: Mutex<()>,
}

// SAFETY: `current` points to an `Inner` (`Send + Sync`) that lives as long as the handle
// (or for ever, once replaced); it is only read through shared references.
unsafe impl<F: Family> Send for Handle<F> {}
// SAFETY: as for `Send`.
unsafe impl<F: Family> Sync for Handle<F> {}

impl<F: Family> std::fmt::Debug for Handle<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.state();
        f.debug_struct("Handle")
            .field("name", &inner.name)
            .field("participant", &inner.me)
            .finish_non_exhaustive()
    }
}

impl<F: Family> Drop for Handle<F> {
    fn drop(&mut self) {
        // SAFETY: `current` came from `Arc::into_raw` and is given back once.
        let inner = unsafe { Arc::from_raw(*self.current.get_mut()) };
        if inner.forks == os::forks() {
            // Stop the watchdog and wait for it here, while this is not its last reference:
            // the handle's state is then dropped on this thread, the watchdog joined, not
            // left to end on its own.
            inner.stop.store(true, Ordering::SeqCst);
            let watchdog = inner
                .watchdog
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(w) = watchdog {
                w.thread().unpark();
                let _ = w.join();
            }
        }
        drop(inner);
    }
}

pub(crate) struct Inner<F: Family> {
    pub(crate) buffer: F,
    pub(crate) table: Arc<RegionBuf<Entry>>,
    map: Arc<Mapping>,
    /// The mapping's file (any open file description of it but our lease's: liveness
    /// probes go through it).
    file: File,
    /// Our lease: this open file description holds the byte of our entry.
    lease: os::Lease,
    /// Our entry.
    pub(crate) me: usize,
    /// The name, or "memfd".
    name: String,
    named: bool,
    /// `os::forks()` when the handle was made.
    forks: u64,
    /// One recovery at a time in this process (the lease cannot tell our threads apart).
    recovering: Mutex<()>,
    /// Tells the watchdog to stop.
    stop: AtomicBool,
    watchdog: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

/// The layout hash: the configuration, this build's version and the sizes of what the
/// mapping holds.
fn layout_hash<F: Family>(config_json: &str, region_bytes: usize) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, config_json.as_bytes());
    fnv(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
    let sizes = [
        region_bytes,
        std::mem::size_of::<Entry>(),
        MAX_PARTICIPANTS,
        VERSION as usize,
    ];
    for n in sizes.into_iter().chain(F::layout_sizes()) {
        fnv(&mut h, &(n as u64).to_le_bytes());
    }
    h
}

/// The participants table and the buffer, built from `region` in that order.
fn build<F: Family>(config: &F::Config, region: &mut Region) -> Result<(RegionBuf<Entry>, F)> {
    let table = region.alloc(MAX_PARTICIPANTS, 128, Entry::empty)?;
    let buffer = F::build(config, region)?;
    Ok((table, buffer))
}

impl<F: Family> Handle<F> {
    /// Create a mapping for `config`: under `name` (a file in /dev/shm, refused if it
    /// exists) or anonymous (a memfd), every byte reserved now.
    pub(crate) fn create(name: Option<&str>, config: F::Config) -> Result<Handle<F>> {
        let label = name.unwrap_or("memfd").to_string();
        let config = F::prepare(config);
        let json = F::config_json(&config);
        if json.len() > CONFIG_MAX {
            return Err(os::err(
                &label,
                format!(
                    "the configuration takes {} bytes, more than {CONFIG_MAX}",
                    json.len()
                ),
            ));
        }
        // The size, from a build that allocates nothing of the columns.
        let mut measure = Region::Measure { next: 0 };
        drop(build::<F>(&config, &mut measure)?);
        let region_bytes = measure.used();
        let total = REGION_OFFSET
            .checked_add(region_bytes)
            .and_then(|n| n.checked_next_multiple_of(4096))
            .ok_or(Error::Allocation { bytes: usize::MAX })?;
        let file = os::create_file(name)?;
        let made = (|| {
            os::reserve(&file, total, &label)?;
            let map = Arc::new(
                Mapping::map(file_fd(&file), total)
                    .map_err(|e| os::err(&label, format!("mmap: {e}")))?,
            );
            let mut region = Region::Mapped {
                map: Arc::clone(&map),
                next: REGION_OFFSET,
                fresh: true,
            };
            let (table, buffer) = build::<F>(&config, &mut region)?;
            debug_assert_eq!(region.used(), REGION_OFFSET + region_bytes);
            // SAFETY: the mapping is ours alone until the ready flag; the header and the
            // configuration fit its first `REGION_OFFSET` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    json.as_ptr(),
                    map.base().add(CONFIG_OFFSET),
                    json.len(),
                );
                map.base().cast::<Header>().write(Header {
                    magic: F::MAGIC,
                    version: VERSION,
                    _pad: 0,
                    layout: layout_hash::<F>(&json, region_bytes),
                    total: total as u64,
                    config_len: json.len() as u64,
                    ready: StdAtomicU64::new(0),
                    recovered: StdAtomicU64::new(0),
                });
            }
            // ORDERING: Release pairs with an attacher's Acquire load: everything the
            // creator wrote is visible to whoever sees the flag.
            header(&map).ready.store(READY, Ordering::Release);
            Handle::join(
                map,
                file.try_clone()
                    .map_err(|e| os::err(&label, e.to_string()))?,
                table,
                buffer,
                label.clone(),
                name.is_some(),
            )
        })();
        if made.is_err() {
            if let Some(name) = name {
                // The name was ours (created above): leave nothing half made behind.
                let _ = std::fs::remove_file(os::path_of(name));
            }
        }
        made
    }

    /// Attach to the mapping named `name`. Refuses a file that is not a mapping of this
    /// family, format and layout.
    pub(crate) fn attach(name: &str) -> Result<Handle<F>> {
        os::check_name(name)?;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(os::path_of(name))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    os::err(name, format!("no {} has this name", F::WHAT))
                }
                _ => os::err(name, format!("cannot open: {e}")),
            })?;
        Handle::attach_file(file, name.to_string(), true)
    }

    /// Attach to the mapping behind descriptor `fd`. The descriptor stays the caller's.
    pub(crate) fn attach_fd(fd: BorrowedFd<'_>) -> Result<Handle<F>> {
        let file = fd
            .try_clone_to_owned()
            .map_err(|e| os::err("memfd", format!("cannot duplicate the descriptor: {e}")))?;
        Handle::attach_file(File::from(file), "memfd".to_string(), false)
    }

    fn attach_file(file: File, label: String, named: bool) -> Result<Handle<F>> {
        let bad = |detail: String| os::err(&label, detail);
        let len = file
            .metadata()
            .map_err(|e| bad(format!("cannot stat: {e}")))?
            .len() as usize;
        if len < REGION_OFFSET {
            return Err(bad(format!("{len} bytes: not a {}", F::WHAT)));
        }
        let map =
            Arc::new(Mapping::map(file_fd(&file), len).map_err(|e| bad(format!("mmap: {e}")))?);
        // SAFETY: the mapping holds at least `REGION_OFFSET` bytes; the magic and the version
        // are plain bytes, read before the ready flag only to refuse a file that is not ours.
        let (magic, version) = unsafe {
            let h = map.base().cast::<Header>();
            (
                std::ptr::addr_of!((*h).magic).read_volatile(),
                std::ptr::addr_of!((*h).version).read_volatile(),
            )
        };
        if magic != F::MAGIC {
            return Err(bad(match &magic[..5] {
                b"KRSHM" => format!(
                    "another family of kary-replay shared buffer, not a {}",
                    F::WHAT
                ),
                _ => format!("not a kary-replay {} (wrong magic)", F::WHAT),
            }));
        }
        if version != VERSION {
            return Err(bad(format!(
                "format version {version}, this build reads {VERSION}"
            )));
        }
        let started = Instant::now();
        // ORDERING: Acquire pairs with the creator's Release store of the flag.
        while header(&map).ready.load(Ordering::Acquire) != READY {
            if started.elapsed() > CREATION_WAIT {
                return Err(bad(
                    "still being created after 5 s (or its creator died creating it)".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let h = header(&map);
        if h.total as usize != len {
            return Err(bad(format!("{len} bytes, its header says {}", h.total)));
        }
        let config_len = h.config_len as usize;
        if config_len > CONFIG_MAX {
            return Err(bad(format!("a configuration of {config_len} bytes")));
        }
        // SAFETY: inside the mapping (`CONFIG_OFFSET + CONFIG_MAX <= REGION_OFFSET <= len`),
        // written once by the creator before the ready flag we acquired.
        let json = unsafe { std::slice::from_raw_parts(map.base().add(CONFIG_OFFSET), config_len) };
        let config = F::config_from_json(json, &label)?;
        let json =
            std::str::from_utf8(json).map_err(|_| bad("configuration is not UTF-8".into()))?;
        let mut region = Region::Mapped {
            map: Arc::clone(&map),
            next: REGION_OFFSET,
            fresh: false,
        };
        let (table, buffer) = build::<F>(&config, &mut region)
            .map_err(|_| bad("smaller than its configuration needs: another layout".into()))?;
        if layout_hash::<F>(json, region.used() - REGION_OFFSET) != h.layout {
            return Err(bad(
                "another layout: made by another version or build of kary-replay".into(),
            ));
        }
        Handle::join(map, file, table, buffer, label, named)
    }

    /// Take an entry of the participants table (recovering it first if its last holder
    /// died), start the watchdog, and hand out the handle.
    fn join(
        map: Arc<Mapping>,
        file: File,
        table: RegionBuf<Entry>,
        mut buffer: F,
        name: String,
        named: bool,
    ) -> Result<Handle<F>> {
        let lease = os::Lease::register(os::reopen(file.as_raw_fd(), &name)?, &name)?;
        let table = Arc::new(table);
        let mut me = None;
        for i in 0..MAX_PARTICIPANTS {
            if os::try_lease(lease.fd(), i).map_err(|e| os::err(&name, format!("lease: {e}")))? {
                me = Some(i);
                break;
            }
        }
        let me = me.ok_or_else(|| {
            os::err(
                &name,
                format!("all {MAX_PARTICIPANTS} participant entries are in use"),
            )
        })?;
        buffer.join(me, &table);
        let inner = Arc::new(Inner {
            buffer,
            table,
            map,
            file,
            lease,
            me,
            name,
            named,
            forks: os::forks(),
            recovering: Mutex::new(()),
            stop: AtomicBool::new(false),
            watchdog: Mutex::new(None),
        });
        // The entry's last holder died without leaving it (its lease gone, its pid still
        // set): what it held is recovered before the entry is ours.
        // ORDERING: SeqCst, as every access to the table's entries.
        if inner.table[me].pid.load(Ordering::SeqCst) != 0 {
            inner.recover_held(&[me]);
        }
        inner.table[me]
            .pid
            .store(u64::from(std::process::id()), Ordering::SeqCst);
        let weak = Arc::downgrade(&inner);
        let watchdog = std::thread::Builder::new()
            .name("kary-replay-shm-watchdog".into())
            .spawn(move || watch(weak))
            .map_err(|e| {
                os::err(
                    &inner.name,
                    format!("cannot start the watchdog thread: {e}"),
                )
            })?;
        *inner.watchdog.lock().unwrap_or_else(|e| e.into_inner()) = Some(watchdog);
        Ok(Handle {
            current: AtomicPtr::new(Arc::into_raw(inner).cast_mut()),
            reattach: Mutex::new(()),
        })
    }

    /// The handle's state; in a child after `fork`, attached again first (`current`).
    /// `Err` only when that attach fails.
    pub(crate) fn live(&self) -> Result<&Inner<F>> {
        // ORDERING: Acquire pairs with the Release store of a re-attach.
        // SAFETY: `current` always points to a live `Inner` (see its doc).
        let inner = unsafe { &*self.current.load(Ordering::Acquire) };
        if inner.forks == os::forks() {
            return Ok(inner);
        }
        let _one = self.reattach.lock().unwrap_or_else(|e| e.into_inner());
        // ORDERING: Acquire, as above.
        // SAFETY: as above.
        let inner = unsafe { &*self.current.load(Ordering::Acquire) };
        if inner.forks == os::forks() {
            return Ok(inner);
        }
        let file = inner
            .file
            .try_clone()
            .map_err(|e| os::err(&inner.name, format!("cannot re-attach after fork: {e}")))?;
        let fresh = Handle::<F>::attach_file(file, inner.name.clone(), inner.named)?;
        // Take the fresh handle's state over; the parent's copy is leaked (see `current`).
        let ptr = fresh.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
        std::mem::forget(fresh);
        // ORDERING: Release pairs with the Acquire loads above.
        self.current.store(ptr, Ordering::Release);
        // SAFETY: just stored, from `Arc::into_raw` of the fresh handle.
        Ok(unsafe { &*ptr })
    }

    /// The handle's state for a call that cannot fail: the re-attached one after a fork if
    /// that works, else the parent's copy (which reads the same mapping).
    pub(crate) fn state(&self) -> &Inner<F> {
        self.live().unwrap_or_else(|_| {
            // SAFETY: as in `live`.
            unsafe { &*self.current.load(Ordering::Acquire) }
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.state().name
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        file_fd(&self.state().file)
    }

    pub(crate) fn mapped_bytes(&self) -> usize {
        self.state().map.len()
    }

    pub(crate) fn recover(&self) -> Result<usize> {
        Ok(self.live()?.recover_dead())
    }

    pub(crate) fn recovered(&self) -> u64 {
        header(&self.state().map).recovered.load(Ordering::Relaxed)
    }

    pub(crate) fn participants(&self) -> Result<Vec<Participant>> {
        let inner = self.live()?;
        Ok((0..MAX_PARTICIPANTS)
            .filter_map(|i| {
                // ORDERING: SeqCst, as every access to the table's entries.
                let pid = inner.table[i].pid.load(Ordering::SeqCst);
                (pid != 0 && (i == inner.me || os::leased(inner.file.as_raw_fd(), i))).then_some(
                    Participant {
                        index: i,
                        pid: pid as u32,
                        this_handle: i == inner.me,
                    },
                )
            })
            .collect())
    }

    pub(crate) fn unlink(&self) -> Result<()> {
        let inner = self.state();
        if !inner.named {
            return Err(os::err(
                &inner.name,
                "an anonymous buffer has no name to unlink",
            ));
        }
        os::unlink(&inner.name)
    }
}

fn file_fd(file: &File) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    file.as_fd()
}

fn header(map: &Mapping) -> &Header {
    // SAFETY: the mapping starts with the header (checked or written by the caller's path);
    // its fields read through this reference are the atomics and values written before the
    // ready flag, never changed after.
    unsafe { &*map.base().cast::<Header>() }
}

impl<F: Family> Inner<F> {
    /// Count one recovered participant in the header.
    fn count_recovered(&self) {
        header(&self.map).recovered.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether entry `i`'s lease is held by a live process (our own entry included).
    fn alive(&self, i: usize) -> bool {
        i == self.me || os::leased(self.file.as_raw_fd(), i)
    }

    /// Recover every participant whose process died: returns how many.
    fn recover_dead(&self) -> usize {
        let _one = self.recovering.lock().unwrap_or_else(|e| e.into_inner());
        let fd = self.lease.fd();
        let mut dead = Vec::new();
        for j in 0..MAX_PARTICIPANTS {
            // ORDERING: SeqCst, as every access to the table's entries.
            if j == self.me || self.table[j].pid.load(Ordering::SeqCst) == 0 {
                continue;
            }
            if self.alive(j) || !os::try_lease(fd, j).unwrap_or(false) {
                continue;
            }
            // The lease is ours: nobody else recovers or takes the entry now. Its pid may
            // have been cleared by a clean exit in between.
            if self.table[j].pid.load(Ordering::SeqCst) == 0 {
                os::release_lease(fd, j);
                continue;
            }
            dead.push(j);
        }
        if dead.is_empty() {
            return 0;
        }
        let done = self.buffer.recover(&self.table, &dead);
        for &j in &dead {
            if done {
                crate::buffer::reservations::clear_entry(&self.table, j);
                self.count_recovered();
            }
            os::release_lease(fd, j);
        }
        if done {
            dead.len()
        } else {
            0
        }
    }

    /// Recover our own entry, whose last holder died (called while joining, its lease ours
    /// already).
    fn recover_held(&self, entries: &[usize]) {
        let _one = self.recovering.lock().unwrap_or_else(|e| e.into_inner());
        let mut attempt = 0;
        while !self.buffer.recover(&self.table, entries) {
            crate::sync::spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
        for &j in entries {
            crate::buffer::reservations::clear_entry(&self.table, j);
            self.count_recovered();
        }
    }
}

impl<F: Family> Drop for Inner<F> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self
            .watchdog
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            if w.thread().id() != std::thread::current().id() {
                let _ = w.join();
            }
        }
        if os::forks() == self.forks {
            // Nothing of ours is in flight (no call can be running: this is the last
            // reference): leave the entry free. The lease goes with its descriptor.
            // ORDERING: SeqCst, as every access to the table's entries.
            self.table[self.me].pid.store(0, Ordering::SeqCst);
            os::release_lease(self.lease.fd(), self.me);
        }
    }
}

/// The watchdog: recover dead participants every `WATCH_INTERVAL` until the handle goes.
fn watch<F: Family>(inner: Weak<Inner<F>>) {
    loop {
        // Woken early by the handle's drop (`unpark`).
        std::thread::park_timeout(WATCH_INTERVAL);
        let Some(inner) = inner.upgrade() else { return };
        if inner.stop.load(Ordering::SeqCst) || os::forks() != inner.forks {
            return;
        }
        inner.recover_dead();
    }
}

/// The public face of a handle type over [`Handle`]: the constructors and the mapping's
/// calls, the same for every family (`$config` its configuration type).
macro_rules! shared_handle_api {
    ($ty:ident, $config:ty) => {
        impl $ty {
            /// Create a buffer under name `name` (a file in /dev/shm, refused if it
            /// exists), every byte reserved now: a /dev/shm too small is
            /// [`Error::Allocation`](crate::Error::Allocation). The name stays until
            /// `unlink`; other processes attach to it by name.
            pub fn create(name: &str, config: $config) -> crate::Result<$ty> {
                Ok($ty(crate::buffer::shm::Handle::create(Some(name), config)?))
            }

            /// Create an anonymous buffer (a memfd): other processes attach to it through
            /// its descriptor (`fd`, passed by inheritance or over a Unix socket).
            pub fn create_anonymous(config: $config) -> crate::Result<$ty> {
                Ok($ty(crate::buffer::shm::Handle::create(None, config)?))
            }

            /// Attach to the buffer named `name`. Refuses a file that is not a buffer of
            /// this family, this build's format and layout.
            pub fn attach(name: &str) -> crate::Result<$ty> {
                Ok($ty(crate::buffer::shm::Handle::attach(name)?))
            }

            /// Attach to the buffer behind descriptor `fd` (a memfd or a /dev/shm file, from
            /// `fd` of another handle). The descriptor stays the caller's.
            pub fn attach_fd(fd: std::os::fd::BorrowedFd<'_>) -> crate::Result<$ty> {
                Ok($ty(crate::buffer::shm::Handle::attach_fd(fd)?))
            }

            /// The buffer's name ("memfd" for an anonymous one).
            pub fn name(&self) -> &str {
                self.0.name()
            }

            /// The mapping's descriptor, for `attach_fd` in another process (it is
            /// close-on-exec: pass it on explicitly).
            pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.0.fd()
            }

            /// Bytes of the mapping.
            pub fn mapped_bytes(&self) -> usize {
                self.0.mapped_bytes()
            }

            /// Recover every participant whose process died now (the watchdog does it
            /// every [`WATCH_INTERVAL`](crate::buffer::WATCH_INTERVAL)): returns how many
            /// were recovered by this call.
            pub fn recover(&self) -> crate::Result<usize> {
                self.0.recover()
            }

            /// Participants recovered over the buffer's life, by any process.
            pub fn recovered(&self) -> u64 {
                self.0.recovered()
            }

            /// The participants alive now (their leases held), this handle included.
            pub fn participants(&self) -> crate::Result<Vec<crate::buffer::Participant>> {
                self.0.participants()
            }

            /// Remove the buffer's name: handles keep working, no new process can attach
            /// by it, and the memory goes when the last handle does. An anonymous buffer
            /// has no name: an error.
            pub fn unlink(&self) -> crate::Result<()> {
                self.0.unlink()
            }

            /// Remove the name `name` of a shared buffer (one whose creator crashed, say).
            pub fn unlink_name(name: &str) -> crate::Result<()> {
                crate::buffer::shm::os::unlink(name)
            }
        }
    };
}
pub(crate) use shared_handle_api;
