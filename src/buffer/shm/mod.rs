//! One buffer shared by several processes: [`ShmBuffer`], the lock-free buffer with its
//! state in one shared mapping.
//!
//! The mapping (a name under /dev/shm, or an anonymous memfd passed by descriptor):
//!
//! ```text
//!   0        header: magic, version, layout hash, size, configuration length, ready flag
//!   4 KiB    the configuration, as JSON (schema, capacity, fanout, alpha, key tag, ...)
//!   64 KiB   the region: the participants table, then the lock-free buffer's slot words,
//!            columns, tree nodes and counters (`region.rs`), at offsets that follow from
//!            the configuration alone
//! ```
//!
//! Every byte is reserved when the buffer is created (`posix_fallocate`): a /dev/shm too
//! small is an `Error::Allocation` then, never a SIGBUS later. The creator writes the
//! header's ready flag last (Release); an attacher checks magic, version, size and the
//! layout hash (of the configuration and of this build's layout) before it uses anything.
//!
//! The protocol is the lock-free buffer's (`lock_free.rs`, `slots/`), the same code over
//! the mapping, with two changes that make a process's death survivable (docs/design.md,
//! "One buffer across processes"):
//!
//! - Readers hold nothing (`ReadMode::Optimistic`): a sampler copies a row with atomic
//!   loads and keeps it only if the slot's word did not change meanwhile, so a sampler that
//!   dies leaves nothing behind, and a writer never waits for readers. Writers and updaters
//!   write their participant number into the slot's word when they take it.
//! - Reservations are recorded (`buffer/reservations.rs`): a writer records the generations it is about
//!   to take from the cursor before its CAS, and confirms them after.
//!
//! Participants. Each handle takes an entry of the participants table and a lease on it: an
//! open-file-description lock on one byte of the file, which the kernel drops when the
//! process dies. A survivor that finds an entry whose lease nobody holds and whose process
//! number is still set recovers it (`recover.rs`): every slot word that names it is
//! published empty at its next epoch (or, held by an update, released), every generation it
//! reserved and did not write is published empty, and the tree is climbed again from its
//! leaves. A watchdog thread per handle looks every [`WATCH_INTERVAL`]; `recover` does it
//! at once.

#[cfg(all(unix, not(loom)))]
mod os;
mod recover;
#[cfg(all(unix, not(loom), test))]
mod tests;

#[cfg(feature = "kill-points")]
pub use crate::faults::{pause_at, Point};
#[cfg(loom)]
pub(crate) use recover::Recoverer;

#[cfg(all(unix, not(loom)))]
pub use handle::{Participant, ShmBuffer, WATCH_INTERVAL};

#[cfg(all(unix, not(loom)))]
mod handle {
    use std::fs::File;
    use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64 as StdAtomicU64, Ordering};
    use std::sync::{Arc, Mutex, Weak};
    use std::time::{Duration, Instant};

    use super::os;
    use crate::buffer::reservations::{Entry, Journal, MAX_PARTICIPANTS};
    use crate::buffer::slot_buffer::SlotBuffer;
    use crate::buffer::slots::ReadMode;
    use crate::buffer::{ConcurrentBuffer, Config};
    use crate::error::{Error, Result};
    use crate::region::{Mapping, Region, RegionBuf};
    use crate::tree::AtomicSumTree;

    const MAGIC: [u8; 8] = *b"KRSHMBUF";
    /// The mapping's format; bumped whenever the layout changes in a way the hash does not
    /// see.
    const VERSION: u32 = 1;
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
        /// Its entry in the table (its owner number in slot words is `index + 1`).
        pub index: usize,
        /// Its process id, as it recorded it.
        pub pid: u32,
        /// Whether it is the handle this was asked through.
        pub this_handle: bool,
    }

    /// The lock-free buffer with its state in a mapping shared by processes: see the module
    /// doc of `buffer::shm` and docs/design.md ("One buffer across processes").
    ///
    /// Every process that uses the buffer holds a handle: the creator's
    /// ([`ShmBuffer::create`], or [`ConcurrentBuffer::new`] for an anonymous one), and one
    /// per attach ([`ShmBuffer::attach`] by name, [`ShmBuffer::attach_fd`] by descriptor).
    /// A handle is a [`ConcurrentBuffer`] like the in-process buffers, shared by the threads
    /// of its process. A process that dies, at any instruction, costs at most the items it
    /// was writing: a survivor recovers what it held within [`WATCH_INTERVAL`] and the time
    /// of one recovery.
    ///
    /// A handle survives `fork`: the child's copy attaches again on its first call (its
    /// own participant entry and lease, its own watchdog), so a buffer passed to a forked
    /// process by inheritance works there as it does in its parent.
    ///
    /// ```
    /// # #[cfg(target_os = "linux")] {
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Schema, ShmBuffer};
    /// let name = format!("kr-doc-{}", std::process::id());
    /// let config = Config::builder(64, Schema::new().column("x", DType::F32, 2)).build()?;
    /// let actor = ShmBuffer::create(&name, config)?;
    /// let learner = ShmBuffer::attach(&name)?; // in another process, usually
    /// actor.insert(&[(&[1.0f32, 2.0][..]).into()], Some(1.0))?;
    /// assert_eq!(learner.len(), 1);
    /// assert_eq!(learner.participants()?.len(), 2);
    /// actor.unlink()?;
    /// # }
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    #[derive(Debug)]
    pub struct ShmBuffer {
        /// The handle's state (`Arc::into_raw`). In a child after `fork` it is replaced, on
        /// first use, by a fresh attach; the parent's copy is leaked there (dropping it
        /// would join a watchdog thread the child does not have), so references to it that
        /// a thread still holds stay valid.
        current: AtomicPtr<Inner>,
        /// One re-attach at a time.
        reattach: Mutex<()>,
    }

    // SAFETY: `current` points to an `Inner` (`Send + Sync`) that lives as long as the
    // handle (or for ever, once replaced); it is only read through shared references.
    unsafe impl Send for ShmBuffer {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for ShmBuffer {}

    impl Drop for ShmBuffer {
        fn drop(&mut self) {
            // SAFETY: `current` came from `Arc::into_raw` and is given back once.
            let inner = unsafe { Arc::from_raw(*self.current.get_mut()) };
            if inner.forks == os::forks() {
                // Stop the watchdog and wait for it here, while this is not its last
                // reference: the handle's state is then dropped on this thread, the
                // watchdog joined, not left to end on its own.
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

    #[derive(Debug)]
    pub(super) struct Inner {
        pub(super) buffer: SlotBuffer<AtomicSumTree>,
        pub(super) table: Arc<RegionBuf<Entry>>,
        pub(super) map: Arc<Mapping>,
        /// The mapping's file (any open file description of it but our lease's: liveness
        /// probes go through it).
        pub(super) file: File,
        /// Our lease: this open file description holds the byte of our entry.
        pub(super) lease: os::Lease,
        /// Our entry.
        pub(super) me: usize,
        /// The name, or "memfd".
        pub(super) name: String,
        pub(super) named: bool,
        /// `os::forks()` when the handle was made.
        forks: u64,
        /// One recovery at a time in this process (the lease cannot tell our threads apart).
        pub(super) recovering: Mutex<()>,
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
    fn layout_hash(config_json: &str, region_bytes: usize) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325;
        fnv(&mut h, config_json.as_bytes());
        fnv(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
        for n in [
            region_bytes,
            std::mem::size_of::<Entry>(),
            MAX_PARTICIPANTS,
            std::mem::size_of::<crate::buffer::slot_buffer::Counters>(),
            std::mem::size_of::<crate::rate::RateWords>(),
            VERSION as usize,
        ] {
            fnv(&mut h, &(n as u64).to_le_bytes());
        }
        h
    }

    /// The participants table and the buffer, built from `region` in that order.
    fn build(
        config: &Config,
        region: &mut Region,
    ) -> Result<(RegionBuf<Entry>, SlotBuffer<AtomicSumTree>)> {
        let table = region.alloc(MAX_PARTICIPANTS, 128, Entry::empty)?;
        let buffer = SlotBuffer::in_region(config.clone(), region)?;
        Ok((table, buffer))
    }

    impl ShmBuffer {
        /// Create a buffer under name `name` (a file in /dev/shm, refused if it exists),
        /// every byte reserved now: a /dev/shm too small is [`Error::Allocation`]. The name
        /// stays until [`ShmBuffer::unlink`]; other processes attach to it by name.
        pub fn create(name: &str, config: Config) -> Result<ShmBuffer> {
            ShmBuffer::create_in(Some(name), config)
        }

        /// Create an anonymous buffer (a memfd): other processes attach to it through its
        /// descriptor ([`ShmBuffer::fd`], passed by inheritance or over a Unix socket).
        pub fn create_anonymous(config: Config) -> Result<ShmBuffer> {
            ShmBuffer::create_in(None, config)
        }

        fn create_in(name: Option<&str>, config: Config) -> Result<ShmBuffer> {
            let label = name.unwrap_or("memfd").to_string();
            let config = config.tagged();
            let json = crate::buffer::config_json::config_json(&config);
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
            drop(build(&config, &mut measure)?);
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
                let (table, buffer) = build(&config, &mut region)?;
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
                        magic: MAGIC,
                        version: VERSION,
                        _pad: 0,
                        layout: layout_hash(&json, region_bytes),
                        total: total as u64,
                        config_len: json.len() as u64,
                        ready: StdAtomicU64::new(0),
                        recovered: StdAtomicU64::new(0),
                    });
                }
                // ORDERING: Release pairs with an attacher's Acquire load: everything the
                // creator wrote is visible to whoever sees the flag.
                header(&map).ready.store(READY, Ordering::Release);
                ShmBuffer::join(
                    config,
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

        /// Attach to the buffer named `name`. Refuses a file that is not a shared buffer of
        /// this build's format and layout.
        pub fn attach(name: &str) -> Result<ShmBuffer> {
            os::check_name(name)?;
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(os::path_of(name))
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => os::err(name, "no shared buffer has this name"),
                    _ => os::err(name, format!("cannot open: {e}")),
                })?;
            ShmBuffer::attach_file(file, name.to_string(), true)
        }

        /// Attach to the buffer behind descriptor `fd` (a memfd or a /dev/shm file, from
        /// [`ShmBuffer::fd`] of another handle). The descriptor stays the caller's.
        pub fn attach_fd(fd: BorrowedFd<'_>) -> Result<ShmBuffer> {
            let file = fd
                .try_clone_to_owned()
                .map_err(|e| os::err("memfd", format!("cannot duplicate the descriptor: {e}")))?;
            ShmBuffer::attach_file(File::from(file), "memfd".to_string(), false)
        }

        fn attach_file(file: File, label: String, named: bool) -> Result<ShmBuffer> {
            let bad = |detail: String| os::err(&label, detail);
            let len = file
                .metadata()
                .map_err(|e| bad(format!("cannot stat: {e}")))?
                .len() as usize;
            if len < REGION_OFFSET {
                return Err(bad(format!("{len} bytes: not a shared buffer")));
            }
            let map =
                Arc::new(Mapping::map(file_fd(&file), len).map_err(|e| bad(format!("mmap: {e}")))?);
            // SAFETY: the mapping holds at least `REGION_OFFSET` bytes; the magic and the
            // version are plain bytes, read before the ready flag only to refuse a file that
            // is not ours.
            let (magic, version) = unsafe {
                let h = map.base().cast::<Header>();
                (
                    std::ptr::addr_of!((*h).magic).read_volatile(),
                    std::ptr::addr_of!((*h).version).read_volatile(),
                )
            };
            if magic != MAGIC {
                return Err(bad("not a kary-replay shared buffer (wrong magic)".into()));
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
            let json =
                unsafe { std::slice::from_raw_parts(map.base().add(CONFIG_OFFSET), config_len) };
            let config =
                crate::buffer::config_json::config_from_json(json, std::path::Path::new(&label))?;
            let json =
                std::str::from_utf8(json).map_err(|_| bad("configuration is not UTF-8".into()))?;
            let mut region = Region::Mapped {
                map: Arc::clone(&map),
                next: REGION_OFFSET,
                fresh: false,
            };
            let (table, buffer) = build(&config, &mut region)
                .map_err(|_| bad("smaller than its configuration needs: another layout".into()))?;
            if layout_hash(json, region.used() - REGION_OFFSET) != h.layout {
                return Err(bad(
                    "another layout: made by another version or build of kary-replay".into(),
                ));
            }
            ShmBuffer::join(config, map, file, table, buffer, label, named)
        }

        /// Take an entry of the participants table (recovering it first if its last holder
        /// died), start the watchdog, and hand out the handle.
        fn join(
            config: Config,
            map: Arc<Mapping>,
            file: File,
            table: RegionBuf<Entry>,
            mut buffer: SlotBuffer<AtomicSumTree>,
            name: String,
            named: bool,
        ) -> Result<ShmBuffer> {
            debug_assert_eq!(buffer.config().key_tag(), config.key_tag());
            let lease = os::Lease::register(os::reopen(file.as_raw_fd(), &name)?, &name)?;
            let table = Arc::new(table);
            let mut me = None;
            for i in 0..MAX_PARTICIPANTS {
                if os::try_lease(lease.fd(), i)
                    .map_err(|e| os::err(&name, format!("lease: {e}")))?
                {
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
            buffer.slots.set_mode(ReadMode::Optimistic {
                owner: me as u64 + 1,
            });
            buffer.journal = Some(Journal::new(Arc::clone(&table), me));
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
            // The entry's last holder died without leaving it (its lease gone, its pid
            // still set): what it held is recovered before the entry is ours.
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
            Ok(ShmBuffer {
                current: AtomicPtr::new(Arc::into_raw(inner).cast_mut()),
                reattach: Mutex::new(()),
            })
        }

        /// The handle's state; in a child after `fork`, attached again first (`current`).
        /// `Err` only when that attach fails.
        fn live(&self) -> Result<&Inner> {
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
            let fresh = ShmBuffer::attach_file(file, inner.name.clone(), inner.named)?;
            // Take the fresh handle's state over; the parent's copy is leaked (see `current`).
            let ptr = fresh.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
            std::mem::forget(fresh);
            // ORDERING: Release pairs with the Acquire loads above.
            self.current.store(ptr, Ordering::Release);
            // SAFETY: just stored, from `Arc::into_raw` of the fresh handle.
            Ok(unsafe { &*ptr })
        }

        /// The handle's state for a call that cannot fail: the re-attached one after a fork
        /// if that works, else the parent's copy (which reads the same mapping).
        fn state(&self) -> &Inner {
            self.live().unwrap_or_else(|_| {
                // SAFETY: as in `live`.
                unsafe { &*self.current.load(Ordering::Acquire) }
            })
        }

        /// The buffer's name ("memfd" for an anonymous one).
        pub fn name(&self) -> &str {
            &self.state().name
        }

        /// The mapping's descriptor, for [`ShmBuffer::attach_fd`] in another process (it is
        /// close-on-exec: pass it on explicitly).
        pub fn fd(&self) -> BorrowedFd<'_> {
            file_fd(&self.state().file)
        }

        /// Bytes of the mapping.
        pub fn mapped_bytes(&self) -> usize {
            self.state().map.len()
        }

        /// Recover every participant whose process died now (the watchdog does it every
        /// [`WATCH_INTERVAL`]): returns how many were recovered by this call.
        pub fn recover(&self) -> Result<usize> {
            Ok(self.live()?.recover_dead())
        }

        /// Participants recovered over the buffer's life, by any process.
        pub fn recovered(&self) -> u64 {
            header(&self.state().map).recovered.load(Ordering::Relaxed)
        }

        /// The participants alive now (their leases held), this handle included.
        pub fn participants(&self) -> Result<Vec<Participant>> {
            let inner = self.live()?;
            Ok((0..MAX_PARTICIPANTS)
                .filter_map(|i| {
                    // ORDERING: SeqCst, as every access to the table's entries.
                    let pid = inner.table[i].pid.load(Ordering::SeqCst);
                    (pid != 0 && (i == inner.me || os::leased(inner.file.as_raw_fd(), i)))
                        .then_some(Participant {
                            index: i,
                            pid: pid as u32,
                            this_handle: i == inner.me,
                        })
                })
                .collect())
        }

        /// Remove the buffer's name: handles keep working, no new process can attach by it,
        /// and the memory goes when the last handle does. An anonymous buffer has no name:
        /// an error.
        pub fn unlink(&self) -> Result<()> {
            let inner = self.state();
            if !inner.named {
                return Err(os::err(
                    &inner.name,
                    "an anonymous buffer has no name to unlink",
                ));
            }
            os::unlink(&inner.name)
        }

        /// Remove the name `name` of a shared buffer (one whose creator crashed, say).
        pub fn unlink_name(name: &str) -> Result<()> {
            os::unlink(name)
        }

        fn buffer(&self) -> &SlotBuffer<AtomicSumTree> {
            &self.state().buffer
        }

        fn live_buffer(&self) -> Result<&SlotBuffer<AtomicSumTree>> {
            Ok(&self.live()?.buffer)
        }
    }

    fn file_fd(file: &File) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        file.as_fd()
    }

    fn header(map: &Mapping) -> &Header {
        // SAFETY: the mapping starts with the header (checked or written by the caller's
        // path); its fields read through this reference are the atomics and values written
        // before the ready flag, never changed after.
        unsafe { &*map.base().cast::<Header>() }
    }

    impl Inner {
        /// Count one recovered participant in the header.
        pub(super) fn count_recovered(&self) {
            header(&self.map).recovered.fetch_add(1, Ordering::Relaxed);
        }

        /// Whether entry `i`'s lease is held by a live process (our own entry included).
        pub(super) fn alive(&self, i: usize) -> bool {
            i == self.me || os::leased(self.file.as_raw_fd(), i)
        }

        pub(super) fn lease_fd(&self) -> RawFd {
            self.lease.fd()
        }
    }

    impl Drop for Inner {
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
    fn watch(inner: Weak<Inner>) {
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

    impl ConcurrentBuffer for ShmBuffer {
        /// An anonymous shared buffer ([`ShmBuffer::create_anonymous`]).
        fn new(config: Config) -> Result<Self> {
            ShmBuffer::create_anonymous(config)
        }
        fn config(&self) -> &Config {
            self.buffer().config()
        }
        fn insert_waiting(
            &self,
            columns: &[crate::storage::ColumnSlice<'_>],
            priority: Option<f64>,
            wait: crate::rate::Wait,
        ) -> Result<crate::buffer::Key> {
            self.live_buffer()?.insert_waiting(columns, priority, wait)
        }
        fn insert_batch_waiting(
            &self,
            columns: &[crate::storage::ColumnSlice<'_>],
            priorities: Option<&[f64]>,
            keys: &mut Vec<crate::buffer::Key>,
            wait: crate::rate::Wait,
        ) -> Result<()> {
            self.live_buffer()?
                .insert_batch_waiting(columns, priorities, keys, wait)
        }
        fn sample_waiting(
            &self,
            draw: crate::buffer::Draw<'_>,
            rows: crate::buffer::Rows<'_, '_>,
            rng: &mut dyn crate::RandomSource,
            out: &mut crate::buffer::SampleBatch,
            wait: crate::rate::Wait,
        ) -> Result<crate::buffer::Descent> {
            self.live_buffer()?
                .sample_waiting(draw, rows, rng, out, wait)
        }
        fn rate_limiter(&self) -> Option<&crate::rate::RateLimiter> {
            self.buffer().rate_limiter()
        }
        fn stats(&self) -> crate::buffer::Stats {
            self.buffer().stats()
        }
        fn update_priorities(
            &self,
            keys: &[crate::buffer::Key],
            priorities: &[f64],
        ) -> Result<crate::buffer::UpdateReport> {
            self.live_buffer()?.update_priorities(keys, priorities)
        }
        fn priority(&self, index: usize) -> Result<f64> {
            self.buffer().priority(index)
        }
        fn key(&self, index: usize) -> Result<Option<crate::buffer::Key>> {
            self.buffer().key(index)
        }
        fn len(&self) -> usize {
            self.buffer().len()
        }
        fn inserted(&self) -> u64 {
            self.buffer().inserted()
        }
        fn total_priority(&self) -> f64 {
            self.buffer().total_priority()
        }
        fn consistency(&self) -> crate::tree::Consistency {
            self.buffer().consistency()
        }
        fn memory_bytes(&self) -> usize {
            self.buffer().memory_bytes()
        }
        fn clear(&self) {
            self.buffer().clear()
        }
        fn rebuild(&self) {
            self.buffer().rebuild()
        }
    }

    impl crate::checkpoint::Checkpoint for ShmBuffer {
        fn save_with(
            &self,
            dir: &std::path::Path,
            options: &crate::checkpoint::SaveOptions,
        ) -> Result<()> {
            self.live_buffer()?.save_with(dir, options)
        }
    }
}
