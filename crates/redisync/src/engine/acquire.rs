//! The acquisition state machine, once for every primitive:
//! re-entry -> local FIFO gate -> settle a pending undo -> loop { attempt
//! (undo armed) -> granted: hold, replica sync | busy: subscribe, then park
//! until woken or the server's bound } -> undo on cancel, error or timeout.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::guard_core::{Folded, GuardCore};
use super::undo::Undo;
use super::{Gate, Reply, Spec, Try};
use crate::engine::hold::{Hold, OwnerTurn};
use crate::engine::hub::{Hub, SlotRef};
use crate::engine::slot::{Slot, Wakeup};
use crate::error::{Error, Result};
use crate::metrics::{Acquisition, Labels, Outcome};
use crate::redis::script::checked_ms;
use crate::retry::{after, is_blip, plain, Outage};

/// Acquires `ask` from `spec`, waiting until `deadline` (`None`: forever).
/// `lease: None` takes the client's watchdog lease, renewed while the guard
/// lives. `Ok(None)` when the deadline passed first.
///
/// Cancel safe: a dropped future gives up its place in the local queue and
/// undoes in the background whatever its attempt in flight may have won.
pub(crate) async fn acquire<S: Spec>(
    spec: &S,
    ask: S::Ask,
    deadline: Option<Instant>,
    lease: Option<Duration>,
) -> Result<Option<GuardCore>> {
    // Boxed: the state machine is deep, and callers nest this future in
    // theirs (a Redlock's in a user's); unboxed, their types ran past the
    // compiler's query depth limit.
    let meter = Acquisition::start(&spec.named().labels);
    let result = Box::pin(acquire_unboxed(spec, ask, deadline, lease)).await;
    meter.finish(&match &result {
        Ok(Some(_)) => Outcome::Acquired,
        Ok(None) => Outcome::TimedOut,
        Err(_) => Outcome::Failed,
    });
    result
}

async fn acquire_unboxed<S: Spec>(
    spec: &S,
    ask: S::Ask,
    deadline: Option<Instant>,
    lease: Option<Duration>,
) -> Result<Option<GuardCore>> {
    let named = spec.named();
    named.check_usable(S::WHAT)?;
    let client = named.client_inner();
    spec.check(ask)?;
    let watchdog = lease.is_none();
    if watchdog {
        // Before any grant: a re-entry may be the first renewed hold too.
        super::watchdog::ensure_running(&named.client);
    }
    let lease = lease.unwrap_or(client.settings.watchdog_timeout);
    let lease_ms = checked_ms("lease", lease)?;
    if let Some(guard) = &client.restart_guard {
        guard.check_lease("lease", lease)?;
    }
    let owner = named.owner_id();
    let holder = spec.holder(&owner, ask);
    let slot = client.hub.slot(&named.key, &named.channel);
    let mut grant = Grant {
        spec,
        slot: &slot,
        ask,
        watchdog,
        lease,
        owner_turn: None,
    };
    // A blip is ridden out while the wait lasts (see `AcquireRetry`): a
    // re-entry's, a pending undo's, and each attempt's in `contend`.
    let mut outage = Outage::of(client.id, &slot.key);
    let waits = deadline.is_none_or(|d| d > Instant::now());
    let mut patience = Patience::new(&mut outage, deadline, waits);
    if let Some(held) = reenter_held(&grant, &holder, lease_ms, &mut patience).await? {
        return Ok(Some(held));
    }
    let Some((gate, turn)) = take_turns(&mut grant, &owner, &holder, deadline).await? else {
        return Ok(None);
    };
    // Re-entry is decided again once the turns are ours: a hold of this
    // owner made meanwhile is re-entered, never taken over by a fresh
    // attempt (a script would replace its field as stale).
    let mut patience = Patience::new(&mut outage, deadline, waits);
    if let Some(held) = reenter_held(&grant, &holder, lease_ms, &mut patience).await? {
        return Ok(Some(held));
    }
    // A pending undo that meets a blip is tried again while the wait
    // lasts: the attempt may only follow it.
    loop {
        match settle_pending(spec, &slot, &holder, gate, turn.is_some()).await {
            Ok(()) => break,
            Err(e) => patience.pause(spec, e).await?,
        }
    }
    contend(&grant, &holder, gate, turn, deadline, lease_ms, outage).await
}

/// The local turns an acquisition takes before it contends: its owner's
/// line (flows of one owner take turns, one line per owner whatever side
/// it asks for; see `OwnerLines`), then the slot's gate. The gate the
/// acquisition contends under and its turn of it; `None` when the deadline
/// passed first.
async fn take_turns<S: Spec>(
    grant: &mut Grant<'_, S>,
    owner: &Arc<str>,
    holder: &Arc<str>,
    deadline: Option<Instant>,
) -> Result<Option<(Gate, Option<OwnedSemaphorePermit>)>> {
    let (spec, slot, ask) = (grant.spec, grant.slot, grant.ask);
    let client = spec.named().client_inner();
    let mut gate = spec.gate(slot, owner, ask)?;
    // A gate kept while held orders the owner's flows already, and a
    // downgrade (`Bypass`) is the holding flow's own.
    // reintroduce: owner-flows-without-turns
    if spec.reentrant() && !matches!(gate, Gate::WhileHeld | Gate::Bypass) {
        // reintroduce: rw-sides-in-separate-owner-lines
        let line = slot.queue.owner_lines.join(owner);
        let Some(permit) = wait_for_turn(&client.hub, slot, &line.turn, deadline).await? else {
            return Ok(None);
        };
        grant.owner_turn = Some(Arc::new(OwnerTurn::new(permit, line)));
        // What this owner holds now decides (a sibling's hold on the other
        // side ended, or lives on as a downgrade's read hold).
        gate = spec.gate(slot, owner, ask)?;
    }
    if gate == Gate::Bypass {
        // A downgrade shares the owner's turn with the hold it stems from:
        // a sibling flow waits until both have ended.
        grant.owner_turn = spec
            .bypassing_holder(owner, ask)
            .and_then(|holder| slot.holds.holder(&holder))
            .and_then(|hold| hold.turns().1);
    }
    let turn = gate_turn_beside_own_undo(spec, slot, holder, gate, deadline).await?;
    Ok(turn.map(|turn| (gate, turn)))
}

/// The slot's turn under `gate` (see [`gate_turn`]), when our own earlier
/// attempt's undo may keep it.
///
/// That undo keeping the turn is not "held by another". Its try in flight
/// (one command) decides, so the turn is waited for that long at least;
/// once the try has ended, the turn went to whoever waited first and the
/// caller's own deadline applies again (failed: the caller settles the
/// undo and returns its error). fred's state alone cannot tell: it may say
/// "connected" right after the connection died. An undo still queued for
/// the turn keeps nothing: whoever has the turn holds, and a zero wait
/// answers at once.
async fn gate_turn_beside_own_undo<S: Spec>(
    spec: &S,
    slot: &Slot,
    holder: &str,
    gate: Gate,
    deadline: Option<Instant>,
) -> Result<Option<Option<OwnedSemaphorePermit>>> {
    let client = spec.named().client_inner();
    // reintroduce: try-zero-waits-for-queued-undo
    let own_undo = || spec.reentrant() && slot.undos.has_turn(holder);
    let turn = if own_undo() {
        let extended = deadline.map(|d| d.max(Instant::now() + client.settings.command_timeout));
        let mut gate_wait = std::pin::pin!(gate_turn(gate, &client.hub, slot, extended));
        tokio::select! {
            biased;
            turn = &mut gate_wait => turn?,
            // reintroduce: zero-wait-outwaits-own-undo
            () = slot.undos.try_ended(holder) => match deadline {
                Some(d) => tokio::time::timeout_at(d, gate_wait).await.unwrap_or(Ok(None))?,
                None => gate_wait.await?,
            },
        }
    } else {
        gate_turn(gate, &client.hub, slot, deadline).await?
    };
    if turn.is_none() && own_undo() {
        client.check_reachable()?;
    }
    Ok(turn)
}

/// A blip `e` met before anything of this call was sent: pauses (see
/// [`Outage::next_pause`]) when the wait may ride it out, else gives up
/// with `e` in plain words.
async fn pause_or_give_up<S: Spec>(
    spec: &S,
    outage: &mut Outage,
    deadline: Option<Instant>,
    waits: bool,
    e: Error,
) -> Result<()> {
    let client = spec.named().client_inner();
    let policy = client.settings.acquire_retry;
    if !is_blip(&e) || !policy.is_enabled() || !waits {
        return Err(plain_error(spec, e, Duration::ZERO));
    }
    let Some(until) = outage.next_pause(&policy, deadline) else {
        return Err(plain_error(spec, e, outage.lasted()));
    };
    tokio::select! {
        biased;
        () = client.hub.closing() => Err(Error::Shutdown),
        () = tokio::time::sleep_until(until) => Ok(()),
    }
}

/// How long a call before its attempt loop rides out blips (see
/// [`pause_or_give_up`]).
struct Patience<'o> {
    outage: &'o mut Outage,
    deadline: Option<Instant>,
    /// Not a zero wait: a blip may be ridden out.
    waits: bool,
    /// It gave up: the error it answered goes up as it is.
    spent: bool,
}

impl<'o> Patience<'o> {
    fn new(outage: &'o mut Outage, deadline: Option<Instant>, waits: bool) -> Patience<'o> {
        Patience {
            outage,
            deadline,
            waits,
            spent: false,
        }
    }

    /// [`pause_or_give_up`]: `Ok(())` after a pause, to try again. Once it
    /// gave up, `e` (its answer, on its way up) as it is.
    async fn pause<S: Spec>(&mut self, spec: &S, e: Error) -> Result<()> {
        if self.spent {
            return Err(e);
        }
        let paused = pause_or_give_up(spec, self.outage, self.deadline, self.waits, e).await;
        self.spent = paused.is_err();
        paused
    }
}

/// `e` in plain words naming the address (see [`retry::plain`]).
fn plain_error<S: Spec>(spec: &S, e: Error, lasted: Duration) -> Error {
    let named = spec.named();
    plain(e, &named.client.endpoints(), S::WHAT, &named.name, lasted)
}

/// Re-enters the live hold `holder` has on this client, if any (`None`:
/// there is none, or it turned out to be lost; the caller then acquires
/// anew). A blip is ridden out while the wait lasts: after a pause, the
/// re-entry is judged and sent again (a guard of it that met the blip
/// counts down in the background; see [`reenter`] for why a re-entry sent
/// again is never a second hold).
async fn reenter_held<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    lease_ms: i64,
    patience: &mut Patience<'_>,
) -> Result<Option<GuardCore>> {
    loop {
        match reenter_held_once(grant, holder, lease_ms, patience).await {
            Ok(held) => {
                patience.outage.over();
                return Ok(held);
            }
            Err(e) => patience.pause(grant.spec, e).await?,
        }
    }
}

/// One try of [`reenter_held`].
async fn reenter_held_once<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    lease_ms: i64,
    patience: &mut Patience<'_>,
) -> Result<Option<GuardCore>> {
    let spec = grant.spec;
    let client = spec.named().client_inner();
    let Some(hold) = spec
        .reentrant()
        .then(|| grant.slot.holds.holder(holder))
        .flatten()
    else {
        return Ok(None);
    };
    // A server too young since its restart has lost the hold: it is not
    // re-entered, and the acquisition waits like a new one. So does a
    // re-entry that came over a newer connection from a young server (it
    // may be a fresh grant there): what it took is given back.
    let generation = guarded_generation(client);
    if restart_young(client).await?.is_some() {
        hold.mark_lost("the server restarted");
    } else if let Some(held) = reenter(grant, holder, &hold, lease_ms, patience).await? {
        if restart_young_since(client, generation).await?.is_none() {
            return Ok(Some(held));
        }
        hold.mark_lost("the server restarted");
        let _ = held.release().await;
    }
    Ok(None)
}

/// The attempt loop, once the local turn `gate` asks for is ours: one
/// [`Contender::step`] after another until the acquisition ends.
async fn contend<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    gate: Gate,
    turn: Option<OwnedSemaphorePermit>,
    deadline: Option<Instant>,
    lease_ms: i64,
    outage: Outage,
) -> Result<Option<GuardCore>> {
    // Outlives the contender: its undo and place go first when dropped.
    let registration = Registration::new(grant.slot, holder);
    // A zero wait is one try that never queues.
    let enqueue = deadline.is_none_or(|d| d > Instant::now());
    let mut contender = Contender {
        grant,
        holder,
        gate,
        deadline,
        lease_ms,
        enqueue,
        refusals_until: deadline.unwrap_or_else(|| {
            Instant::now() + grant.spec.named().client_inner().settings.command_timeout
        }),
        place: Place::new(&registration.wakeup),
        undo: Undo::new(grant.spec, grant.slot, holder, None, turn),
        ride: Ride {
            outage,
            wakeup: &registration.wakeup,
            deadline,
            waits: enqueue,
        },
    };
    loop {
        if let Step::Done(held) = contender.step().await? {
            return Ok(held);
        }
    }
}

/// Where a step of [`contend`] leaves the acquisition.
enum Step {
    /// It ended: held, or `None` once the deadline passed.
    Done(Option<GuardCore>),
    /// The next step at once (a blip ridden out, a hand-off not kept, a
    /// subscription made, a wake-up or the server's bound).
    Again,
    /// Busy: look again at this instant unless woken first.
    Busy(Instant),
}

/// What a step read before its attempt, for judging the grant.
#[derive(Clone, Copy)]
struct Seen {
    /// The slot's wake-up generation (see [`wait_while_exhausted`]).
    exhausted_since: u64,
    /// The guarded connection generation (see [`guarded_generation`]).
    generation: u64,
}

/// What [`contend`] carries from one step to the next.
struct Contender<'c, S: Spec> {
    grant: &'c Grant<'c, S>,
    holder: &'c Arc<str>,
    gate: Gate,
    deadline: Option<Instant>,
    lease_ms: i64,
    /// Not a zero wait: an attempt may queue us.
    enqueue: bool,
    /// Until when a refusal while the slot migrates is tried again.
    refusals_until: Instant,
    // Dropped in this order: the place's hold on a shutdown, then the undo.
    place: Place,
    undo: Undo<S>,
    ride: Ride<'c>,
}

impl<S: Spec> Contender<'_, S> {
    /// One turn of the loop: a hand-off to take, or one attempt (once the
    /// slot is not exhausted and the server not too young), then the wait
    /// its answer asks for.
    async fn step(&mut self) -> Result<Step> {
        let named = self.grant.spec.named();
        let client = named.client_inner();
        if let Err(e) = client.check_open() {
            let queue = (self.place.queued, false);
            return Err(failed(self.grant, self.holder, queue, &mut self.undo, e).await);
        }
        let wakeup = self.ride.wakeup;
        if let Some(token) = wakeup.take_handed(self.place.number) {
            if self.place.queued {
                return self.take_handed(token).await;
            }
        }
        // The slot's generation, of local releases and wake-ups for all
        // (what a grant that exhausted the permits waits for), and ours.
        // A waiter without a queue entry looks again as often as a queued
        // one: the server's bound may predate a hand-off of a shorter lease.
        let look = handed_look(self.grant.lease);
        let may_wait = self.enqueue && !self.place.queued;
        let slot = self.grant.slot;
        let Some(exhausted_since) =
            wait_while_exhausted(slot, may_wait, look, self.deadline, &named.labels).await
        else {
            return Ok(Step::Done(None));
        };
        let since = wakeup.generation();
        // A server too young since its restart grants nothing: wait (a
        // release message or its coming of age wakes us).
        let generation = guarded_generation(client);
        let young = match restart_young(client).await {
            Ok(young) => young,
            Err(e) => return self.ride_out(e, false, false).await,
        };
        if let Some(left) = young {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Step::Done(None));
            }
            park(wakeup, since, after(left), self.deadline, &named.labels).await;
            return Ok(Step::Again);
        }
        let seen = Seen {
            exhausted_since,
            generation,
        };
        match self.attempt(seen).await? {
            Step::Busy(until) => self.wait(since, until).await,
            step => Ok(step),
        }
    }

    /// Takes the hold a release handed us while we waited in the queue
    /// (whatever the deadline says: it is ours, and cheaper to keep than
    /// to give back).
    async fn take_handed(&mut self, token: u64) -> Result<Step> {
        let (grant, holder, gate) = (self.grant, self.holder, self.gate);
        let busy_at = self.place.busy_at;
        match handed(grant, holder, gate, &mut self.undo, token, busy_at).await {
            Ok(Some(held)) => Ok(Step::Done(Some(held))),
            Ok(None) => {
                self.place.left();
                Ok(Step::Again)
            }
            // What was handed to us is still to be given back (a blip met
            // while it was judged or synced): undone in order before the
            // next attempt.
            Err(e) if self.undo.is_armed() => self.ride_out(e, true, false).await,
            Err(e) => Err(e),
        }
    }

    /// Sends one attempt and reads its reply; `seen` from before it.
    async fn attempt(&mut self, seen: Seen) -> Result<Step> {
        let (spec, slot) = (self.grant.spec, self.grant.slot);
        let named = spec.named();
        // Subscribed before the attempt: a release after it is heard. A
        // subscription another slot of the name keeps costs nothing.
        let heard = named.client_inner().hub.attach_if_subscribed(slot);
        let sent_at = Instant::now();
        self.undo.arm(sent_at + spec.linger(self.grant.lease));
        let (holder, lease_ms, enqueue) = (self.holder, self.lease_ms, self.enqueue);
        let attempt =
            self.place
                .attempt::<S, _>(named, slot, holder, lease_ms, enqueue, self.grant.ask);
        let reply = attempt_carrying(spec, slot, attempt).await;
        slot.queue
            .set_expect_busy(matches!(reply, Ok(Reply::Busy { .. })));
        match reply {
            // Refused unrun while the slot migrates (after the runner's own
            // retries): nothing changed, so wait and try again while the
            // wait lasts (`lock()`: for the command timeout).
            Err(e) if e.is_refused() && Instant::now() < self.refusals_until => {
                tracing::debug!(lock_key = %named.key, error = %e, "refused while the slot moves; trying again");
                Ok(Step::Busy(Instant::now() + REFUSED_PAUSE))
            }
            // The attempt in flight may have queued us, or granted (its
            // outcome unknown: undone before the next attempt).
            Err(e) => {
                let in_doubt = e.outcome_unknown();
                self.ride_out(e, in_doubt, enqueue).await
            }
            Ok(Reply::Granted { token, exhausted }) => {
                let exhausted = exhausted.filter(|_| heard && self.gate == Gate::UntilGranted);
                self.granted(token, exhausted, seen, sent_at).await
            }
            Ok(Reply::Busy {
                until,
                queued,
                renumbered,
            }) => {
                self.ride.outage.over();
                if !queued {
                    self.undo.disarm();
                }
                let entry = (queued, renumbered.then_some(self.ride.wakeup));
                let client = &named.client;
                let until = self
                    .place
                    .busy::<S>(client, entry, sent_at, until, self.grant.lease);
                Ok(Step::Busy(until))
            }
        }
    }

    /// An attempt sent at `sent_at` was granted `token`; `exhausted`: what
    /// the grant says of the permits left (see [`LocalQueue::note_exhausted`](crate::engine::slot::queue::LocalQueue::note_exhausted)).
    async fn granted(
        &mut self,
        token: u64,
        exhausted: Option<Instant>,
        seen: Seen,
        sent_at: Instant,
    ) -> Result<Step> {
        let (spec, slot) = (self.grant.spec, self.grant.slot);
        self.ride.outage.over();
        // A hand-off that crossed this grant is stale: the grant replaced it.
        let _ = self.ride.wakeup.take_handed(self.place.number);
        // A young server's grant is undone (the undo stays armed until then).
        let young = match restart_young_since(spec.named().client_inner(), seen.generation).await {
            Ok(young) => young,
            Err(e) => return self.ride_out(e, true, false).await,
        };
        if let Some(left) = young {
            if let Err(e) = spec.undo(slot, self.holder, None).await {
                return self.ride_out(e, true, false).await;
            }
            self.undo.disarm();
            // A new entry number: a hand-off to the entry this grant took,
            // crossing it, is stale and must not be taken as a hand-off to
            // the next entry.
            self.place = Place::new(self.ride.wakeup);
            return Ok(Step::Busy(after(left)));
        }
        self.undo.disarm();
        slot.queue.note_exhausted(seen.exhausted_since, exhausted);
        // The local turn stays with the acquisition until the grant is
        // synced: one given back below tries again as its client's first
        // task.
        let held = self
            .grant
            .new_held(self.holder.clone(), token, sent_at, None);
        self.sync(held).await
    }

    /// Waits for the replicas to have a new grant (when the client asks
    /// for it) and keeps it.
    async fn sync(&mut self, held: GuardCore) -> Result<Step> {
        match self.grant.synced(held).await? {
            Synced::Kept(held) => Ok(self.keep(held)),
            // Another flow of the owner re-entered it: theirs too, never
            // undone; synced again.
            Synced::Blip(held, e) if held.hold().is_shared() => {
                let r = (&mut self.undo, &mut self.place, &mut self.ride);
                match resync_shared(self.grant, self.holder, r, held, e).await? {
                    Some(held) => Ok(self.keep(held)),
                    None => Ok(Step::Again),
                }
            }
            // Whether the replicas have the grant is unknown: it is given
            // back in order, as a grant in doubt, before the next attempt
            // (never a background release under the holder id the next
            // attempt uses).
            Synced::Blip(held, e) => {
                if !held.forget() {
                    // Shared in the meantime: this guard went (a count-
                    // down); the next attempt acquires again.
                    return self.ride_out(e, false, false).await;
                }
                self.undo
                    .arm(Instant::now() + self.grant.spec.linger(self.grant.lease));
                self.ride_out(e, true, false).await
            }
        }
    }

    /// The acquisition ends holding `held`.
    fn keep(&mut self, held: GuardCore) -> Step {
        keep_turn_if(&held, &mut self.undo, self.gate);
        Step::Done(Some(held))
    }

    /// After a busy answer: until `until` (the server's bound) unless a
    /// release wakes us, subscribed first; `since`: the wake-up generation
    /// from before the attempt.
    async fn wait(&mut self, since: u64, until: Instant) -> Result<Step> {
        let (spec, slot) = (self.grant.spec, self.grant.slot);
        let wakeup = self.ride.wakeup;
        if self.place.queued && wakeup.has_handed(self.place.number) {
            return Ok(Step::Again); // handed the hold while the reply was on its way
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            if self.place.queued && spec.undo(slot, self.holder, None).await.is_ok() {
                self.undo.disarm();
            }
            // Otherwise the undo runs in the background.
            return Ok(Step::Done(None));
        }
        if !slot.wakeups.is_subscribed() {
            // Subscribe, then try again before parking: a message sent
            // before the subscription would be missed.
            let client = spec.named().client_inner();
            if let Err(e) = client.hub.ensure_subscribed(slot).await {
                return self.ride_out(e, false, false).await;
            }
            return Ok(Step::Again);
        }
        park(wakeup, since, until, self.deadline, &spec.named().labels).await;
        Ok(Step::Again)
    }

    /// [`ride_out`] for this acquisition: `Step::Again` once ridden out.
    async fn ride_out(&mut self, e: Error, in_doubt: bool, in_flight: bool) -> Result<Step> {
        let (undo, place, ride) = (&mut self.undo, &mut self.place, &mut self.ride);
        ride_out(
            self.grant,
            self.holder,
            undo,
            place,
            ride,
            e,
            in_doubt,
            in_flight,
        )
        .await?;
        Ok(Step::Again)
    }
}

/// Runs `attempt` (unless the client shuts down first), carrying the
/// release of a guard of this client dropped just before when one is
/// parked and the kind's script can carry it (see [`Folded`]); what that
/// release found is applied once the reply is in.
async fn attempt_carrying<S: Spec>(
    spec: &S,
    slot: &SlotRef,
    mut attempt: Try<'_, S::Ask>,
) -> Result<Reply> {
    let client = &spec.named().client;
    let folded = spec
        .hold_ops(attempt.ask)
        .folds_release
        .then(|| Folded::take(client, slot))
        .flatten();
    let released = AtomicI64::new(-1);
    attempt.release = folded.as_ref().map(|f| (f.hold(), &released));
    let reply = run_attempt(spec, attempt).await;
    if let Some(folded) = folded {
        match released.load(Ordering::Acquire) {
            // No answer (an error, no reply): sent again in the background.
            code if code < 0 || reply.is_err() => drop(folded),
            code => folded.finish(code),
        }
    }
    reply
}

/// Where an acquisition stands in the name's queue in Redis.
struct Place {
    /// An attempt left a queue entry.
    queued: bool,
    /// When the last busy attempt was sent: a hold handed to us while we
    /// wait was granted after that attempt ran, so its lease counts from
    /// its sending.
    busy_at: Instant,
    /// Held while in a hand-off queue: a shutdown waits for us to leave it.
    in_queue: Option<crate::engine::client_inner::BackgroundTask>,
    /// The number of this acquisition's queue entry (see [`Try::number`]),
    /// and the one a new entry takes ([`Try::next_number`]).
    number: u64,
    next_number: u64,
}

impl Place {
    /// A new acquisition, waiting on `wakeup` (its registration's).
    fn new(wakeup: &Wakeup) -> Place {
        let (number, next_number) = (new_wait_number(), new_wait_number());
        wakeup.expect_entries(number, next_number);
        Place {
            queued: false,
            busy_at: Instant::now(),
            in_queue: None,
            number,
            next_number,
        }
    }

    /// A fresh attempt (see [`Try`]) from where we stand. One that may
    /// queue us in a hand-off queue holds the client's shutdown back until
    /// we leave it.
    fn attempt<'a, S: Spec, A>(
        &mut self,
        named: &super::Named,
        slot: &Slot,
        holder: &'a str,
        lease_ms: i64,
        enqueue: bool,
        ask: A,
    ) -> Try<'a, A> {
        if enqueue && self.in_queue.is_none() {
            self.in_queue = named.client.start_background();
        }
        let expect_busy = slot.queue.expects_busy();
        Try {
            holder,
            lease_ms,
            keep: None,
            enqueue,
            queued: self.queued,
            number: self.number,
            next_number: self.next_number,
            expect_busy,
            ask,
            release: None,
        }
    }

    /// A busy reply sent at `at`, with the server's bound `until`: when to
    /// look again. `entry`: whether we are queued, and the wake-up to renew
    /// when the attempt queued a new entry under [`Place::next_number`].
    fn busy<S: Spec>(
        &mut self,
        client: &Arc<crate::engine::client_inner::ClientInner>,
        entry: (bool, Option<&Wakeup>),
        at: Instant,
        until: Instant,
        lease: Duration,
    ) -> Instant {
        let (queued, renumbered) = entry;
        if let Some(wakeup) = renumbered {
            // What was handed to the old entry (a late message) is not ours.
            self.number = self.next_number;
            self.next_number = new_wait_number();
            wakeup.expect_entries(self.number, self.next_number);
        }
        self.queued = queued;
        self.busy_at = at;
        if !queued {
            self.in_queue = None;
            return until;
        }
        if self.in_queue.is_none() {
            self.in_queue = client.start_background();
        }
        // A hold handed to us counts its lease from this attempt: look
        // again before too much of it is gone.
        until.min(at + handed_look(lease))
    }

    /// Out of the queue (granted, or given back).
    fn left(&mut self) {
        self.queued = false;
        self.in_queue = None;
    }
}

/// A waiting acquisition's state while it rides out a blip.
struct Ride<'w> {
    outage: Outage,
    /// The registration's wake-up (a fresh [`Place`] after an undo).
    wakeup: &'w Wakeup,
    deadline: Option<Instant>,
    /// Not a zero wait: a blip may be ridden out.
    waits: bool,
}

/// A contending acquisition met `e`. A blip (see [`is_blip`]) is ridden out
/// while the wait lasts ([`AcquireRetry`](crate::AcquireRetry)): a pause
/// with back-off and jitter, then `Ok(())` to try again. `in_doubt`: what
/// failed may have left a grant or a queue entry (an attempt whose outcome
/// is unknown, a grant being judged): it is undone, inline and retried
/// likewise, before `Ok(())`, so the next attempt is never a second grant
/// (see the table in [`crate::engine`]). Otherwise, or once the deadline
/// passed, the call's error in plain words (see [`failed`]; an undo in
/// doubt stays armed). `in_flight`: the failed attempt may have queued us.
#[allow(clippy::too_many_arguments)]
async fn ride_out<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    undo: &mut Undo<S>,
    place: &mut Place,
    ride: &mut Ride<'_>,
    mut e: Error,
    in_doubt: bool,
    in_flight: bool,
) -> Result<()> {
    let spec = grant.spec;
    let client = spec.named().client_inner();
    let policy = client.settings.acquire_retry;
    let mut lasted = Duration::ZERO;
    if is_blip(&e) && policy.is_enabled() && ride.waits {
        loop {
            let Some(until) = ride.outage.next_pause(&policy, ride.deadline) else {
                lasted = ride.outage.lasted();
                break;
            };
            tokio::select! {
                biased;
                () = client.hub.closing() => {
                    e = Error::Shutdown;
                    break;
                }
                () = tokio::time::sleep_until(until) => {}
            }
            // Nothing is sent while fred reconnects (it would wait in its
            // queue, or fail at once): the next pause first.
            if client.check_reachable().is_err() {
                continue;
            }
            if !in_doubt {
                return Ok(());
            }
            match spec.undo(grant.slot, holder, None).await {
                Ok(()) => {
                    undo.disarm();
                    // A late hand-off of the old entry is not ours.
                    *place = Place::new(ride.wakeup);
                    return Ok(());
                }
                Err(again) if is_blip(&again) => e = again,
                Err(other) => return Err(other),
            }
        }
    }
    let e = plain_error(spec, e, lasted);
    if in_doubt && !matches!(e, Error::Shutdown) {
        // The undo stays armed: it runs in the background.
        return Err(e);
    }
    Err(failed(
        grant,
        holder,
        (place.queued || in_doubt, in_flight),
        undo,
        e,
    )
    .await)
}

/// A grant whose replica `WAIT` met the blip `e` while another flow of its
/// owner shares it: not undone (the hold is theirs too). Once Redis is back
/// (ridden out as any blip), a renewal is written on the connection the
/// `WAIT` then counts, and the sync is asked again. `None`: the hold was
/// lost meanwhile (this guard goes; the caller acquires anew).
async fn resync_shared<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    (undo, place, ride): (&mut Undo<S>, &mut Place, &mut Ride<'_>),
    mut held: GuardCore,
    mut e: Error,
) -> Result<Option<GuardCore>> {
    loop {
        ride_out(grant, holder, undo, place, ride, e, false, false).await?;
        match held.extend(grant.lease).await {
            Ok(()) => {}
            Err(Error::NotHeld { .. }) => return Ok(None),
            Err(again) if is_blip(&again) => {
                e = again;
                continue;
            }
            Err(other) => return Err(other),
        }
        match grant.synced(held).await? {
            Synced::Kept(synced) => return Ok(Some(synced)),
            Synced::Blip(back, again) => (held, e) = (back, again),
        }
    }
}

/// An attempt failed with `e` (returned): a shutdown leaves the queue
/// first; the undo stays armed while the command may have run or we are
/// queued. `queue`: whether we are queued, and whether an attempt that may
/// have queued us was in flight.
async fn failed<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &str,
    queue: (bool, bool),
    undo: &mut Undo<S>,
    e: Error,
) -> Error {
    let (queued, in_flight) = queue;
    if matches!(e, Error::Shutdown) {
        leave_at_shutdown(grant, holder, queued || in_flight, undo).await;
    } else if !queued && !e.outcome_unknown() {
        undo.disarm();
    }
    e
}

/// A waiter of a client that shuts down leaves the wait queue it is in
/// (the shutdown waits for it, up to a command timeout), so a release does
/// not hand the lock to nobody: what it may have been handed goes on to
/// the next waiter.
async fn leave_at_shutdown<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &str,
    queued: bool,
    undo: &mut Undo<S>,
) {
    if !queued {
        return;
    }
    let client = grant.spec.named().client_inner();
    let leave = grant.spec.undo(grant.slot, holder, None);
    if let Ok(Ok(())) = tokio::time::timeout(client.settings.command_timeout, leave).await {
        undo.disarm();
    }
}

/// Takes a hold a release handed to `holder` while it waited in the queue
/// (see the hand-off in [`crate::engine`]), with `token`. `sent_at`: when
/// the last busy attempt was sent; the hold was granted after that attempt
/// ran, so its lease counts from its sending. A server too young under the
/// client's restart guard gets the hold back (`Ok(None)`: the caller tries
/// again). An error with `undo` still armed leaves the hold handed to us
/// in Redis, in doubt (a blip met while the server's age was read, or while
/// the hold was renewed and synced): the caller undoes it before its next
/// attempt.
async fn handed<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    gate: Gate,
    undo: &mut Undo<S>,
    token: u64,
    sent_at: Instant,
) -> Result<Option<GuardCore>> {
    let client = grant.spec.named().client_inner();
    // The release that handed it ran on the server as it is now, or on one
    // that has restarted since (a proxy may have kept the connection): a
    // guarded client reads the uptime again.
    if let Some(guard) = &client.restart_guard {
        guard.forget();
    }
    if restart_young(client).await?.is_some() {
        grant.spec.undo(grant.slot, holder, None).await?;
        undo.disarm();
        return Ok(None);
    }
    undo.disarm();
    // The local turn stays with the acquisition until the hold is
    // confirmed: one given up below tries again as its client's first
    // task, not behind the task that would take the turn meanwhile.
    let held = grant.new_held(holder.clone(), token, sent_at, None);
    if client.settings.replica_sync.is_none() {
        keep_turn_if(&held, undo, gate);
        return Ok(Some(held));
    }
    // The hand-off was written on the releaser's connection: `WAIT` counts
    // the writes of ours, so a write after it (renewing the lease it gave
    // us) comes first. Unacknowledged, the hold goes on to the next waiter.
    if let Err(e) = held.extend(grant.lease).await {
        if is_blip(&e) {
            // Whether the renewal ran, or the replicas have the hold, is
            // unknown: the undo gives it back in order (see `contend`),
            // unless a flow of the owner re-entered it meanwhile.
            if held.forget() {
                undo.arm(Instant::now() + grant.spec.linger(grant.lease));
            }
            return Err(e);
        }
        // Given back before anything else is sent: the next attempt uses
        // the same holder id, and a release in the background could land
        // after that attempt's grant and free it (a semaphore's release
        // knows the permit id only).
        let released = held.release_in_order().await;
        if matches!(e, Error::NotHeld { .. }) {
            // Gone before we could renew it (force-unlocked, expired): we
            // are not queued any more; wait on, once the release is done.
            return match released {
                Ok(()) | Err(Error::NotHeld { .. }) => Ok(None),
                // Still on its way (finished in the background): no
                // attempt may follow it under this holder id.
                Err(e) => Err(e),
            };
        }
        if let Err(undone) = released {
            tracing::warn!(target: "redisync.release.failed", lock_key = %grant.spec.named().key, error = %undone, "giving back an unsynced hand-off failed; it expires with its lease");
        }
        return Err(e);
    }
    keep_turn_if(&held, undo, gate);
    Ok(Some(held))
}

/// A confirmed hold takes the acquisition's local turn when it keeps it
/// while held ([`Gate::WhileHeld`]); otherwise the turn is given up here.
fn keep_turn_if<S: Spec>(held: &GuardCore, undo: &mut Undo<S>, gate: Gate) {
    let turn = undo.turn.take();
    let kept = held.hold();
    kept.keep_turn(turn.filter(|_| gate == Gate::WhileHeld));
    if kept.is_lost() {
        // Lost meanwhile (force-unlocked, say): its loss let the turn go
        // already, or this does.
        kept.keep_turn(None);
    }
}

/// The command connection's generation when the client has a restart
/// guard (a grant over a newer connection is judged again), else 0 (nothing
/// to judge: no lock and no channel read on the hot path).
fn guarded_generation(client: &crate::engine::client_inner::ClientInner) -> u64 {
    if client.restart_guard.is_some() {
        client.connection_generation()
    } else {
        0
    }
}

/// [`restart_young`] for a reply that came over a newer connection than
/// `generation` (from [`guarded_generation`]): the server may have
/// restarted since it was judged. `None` when the connection is the same.
async fn restart_young_since(
    client: &crate::engine::client_inner::ClientInner,
    generation: u64,
) -> Result<Option<Duration>> {
    if guarded_generation(client) == generation {
        return Ok(None);
    }
    restart_young(client).await
}

/// How long the server stays too young to grant under the client's restart
/// guard (see [`crate::redis::restart`]); `None` without a guard or when it is old
/// enough.
async fn restart_young(
    client: &crate::engine::client_inner::ClientInner,
) -> Result<Option<Duration>> {
    restart_young_by(client, client.restart_guard.as_ref()).await
}

/// [`restart_young`] under `guard` (a handle's own: see
/// [`Named::restart_guard`](super::Named::restart_guard)).
async fn restart_young_by(
    client: &crate::engine::client_inner::ClientInner,
    guard: Option<&crate::redis::restart::RestartGuard>,
) -> Result<Option<Duration>> {
    let Some(guard) = guard else {
        return Ok(None);
    };
    // Seen old on this connection: it has not restarted since, unless a
    // proxy kept the connection; then the acquisition's script sees the
    // server's new LASTSAVE and refuses (see `run_attempt`). Else one
    // INFO, remembered for the connection.
    let generation = client.connection_generation();
    if guard.is_proven_old_on(generation) {
        return Ok(None);
    }
    let (uptime, saved) = client.server_age().await?;
    let left = guard.judge(generation, client.connection_generation(), uptime);
    if let (None, Some(saved)) = (left, saved) {
        guard.accept_save(saved);
    }
    Ok(left)
}

/// Runs `attempt` (unless the client shuts down first). A guarded client's
/// script refuses to run when the server's LASTSAVE is new (a restart, maybe
/// behind a proxy that kept the connection, or just a save): the uptime
/// then decides. Young, the answer is busy until the server is old enough;
/// old, the attempt is sent again, once (refused again, a save came in
/// between: busy for a moment).
async fn run_attempt<S: Spec>(spec: &S, attempt: Try<'_, S::Ask>) -> Result<Reply> {
    let client = spec.named().client_inner();
    let again = Try {
        release: None,
        ..attempt
    };
    let busy = |left: Duration| Reply::Busy {
        until: after(left),
        queued: again.queued,
        renumbered: false,
    };
    match client.hub.unless_closing(spec.attempt(attempt)).await {
        Err(e) if e.is_restart_suspected() => {
            let guard = spec.named().restart_guard();
            if let Some(guard) = guard {
                guard.forget();
            }
            if let Some(left) = restart_young_by(client, guard).await? {
                return Ok(busy(left));
            }
            match client.hub.unless_closing(spec.attempt(again)).await {
                Err(e) if e.is_restart_suspected() => Ok(busy(REFUSED_PAUSE)),
                other => other,
            }
        }
        other => other,
    }
}

/// Parks until woken (a release was heard) or `until` (the server's bound),
/// `deadline` at the latest; counts the wake-up by its cause.
async fn park(
    wakeup: &Wakeup,
    since: u64,
    until: Instant,
    deadline: Option<Instant>,
    labels: &Labels,
) {
    let bound = deadline.map_or(until, |d| d.min(until));
    if wakeup.wait(since, bound).await {
        labels.woken(true);
    } else if bound == until {
        labels.woken(false);
    }
}

/// The slot's wake-up generation to attempt at. When the last grant took
/// what was left and no release woke the slot since, and `may_wait`, first
/// waits for one (or the server's bound) rather than ask Redis in vain:
/// `None` when `deadline` passed meanwhile. Local releases and wake-ups for
/// every waiter wake the slot; a waiter that waits so has no queue entry.
/// `look`: the longest it waits so.
async fn wait_while_exhausted(
    slot: &Slot,
    may_wait: bool,
    look: Duration,
    deadline: Option<Instant>,
    labels: &Labels,
) -> Option<u64> {
    let wakeup = &slot.wakeups.all;
    let since = wakeup.generation();
    let Some(mut until) = slot.queue.take_exhausted(since).filter(|_| may_wait) else {
        return Some(since);
    };
    until = until.min(Instant::now() + look);
    park(wakeup, since, until, deadline, labels).await;
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return None;
    }
    Some(wakeup.generation())
}

/// Numbers the queue entries of this process (see [`Try::number`]).
static WAIT_NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_wait_number() -> u64 {
    WAIT_NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A waiter in a hand-off queue tries again (refreshing when its last busy
/// attempt was sent) this many times per lease at least, so a hold handed
/// to it starts with at least (1 - 1/this) of its lease left by our clock.
const HANDED_LEASE_LOOKS: u32 = 4;

/// The shortest pause between two looks of a waiter, whatever its lease:
/// a lease of 1 ms (1 ns is taken as 1 ms) would otherwise look every
/// 250 µs, a hot loop of attempts (thousands per second) while another
/// holds the lock. A hold handed to a waiter with so short a lease may
/// expire before it looks; the lock is then free and its next attempt
/// takes it.
const LOOK_FLOOR: Duration = Duration::from_millis(10);

/// How long a waiter with `lease` waits at most before it looks again:
/// `lease / HANDED_LEASE_LOOKS`, at least [`LOOK_FLOOR`].
fn handed_look(lease: Duration) -> Duration {
    (lease / HANDED_LEASE_LOOKS).max(LOOK_FLOOR)
}

/// How often a wait for a local turn looks for a holder whose lease bounds
/// it, while none is known (its grant may be in flight).
const TURN_LOOK: Duration = Duration::from_millis(100);

/// Pause before an attempt the cluster refused is sent again.
const REFUSED_PAUSE: Duration = Duration::from_millis(100);

/// What a grant needs to become a guard.
struct Grant<'a, S: Spec> {
    spec: &'a S,
    slot: &'a SlotRef,
    ask: S::Ask,
    watchdog: bool,
    lease: Duration,
    /// The owner's turn the acquisition waited for (see `OwnerLines`),
    /// kept by the hold it wins.
    owner_turn: Option<Arc<OwnerTurn>>,
}

impl<S: Spec> Grant<'_, S> {
    /// A new hold (one fencing token) with its first guard.
    fn new_held(
        &self,
        holder: Arc<str>,
        token: u64,
        sent_at: Instant,
        permit: Option<OwnedSemaphorePermit>,
    ) -> GuardCore {
        let named = self.spec.named();
        let hold = Arc::new(
            Hold::new(
                self.spec.hold_ops(self.ask),
                named.key.clone(),
                named.channel.clone(),
                holder,
                token,
                sent_at,
                self.lease,
                self.watchdog,
            )
            .metered(&named.labels),
        );
        hold.keep_turn(permit);
        hold.keep_owner_turn(self.owner_turn.clone());
        self.slot.holds.add(hold.clone());
        self.held(hold)
    }

    fn held(&self, hold: Arc<Hold>) -> GuardCore {
        let named = self.spec.named();
        GuardCore::new(
            named.client.clone(),
            named.name.clone(),
            self.slot.clone(),
            hold,
            self.watchdog,
        )
    }

    /// Replica sync of an acquisition: with replica sync on, `WAIT`s (see
    /// [`crate::redis::replica::writes_synced`]); too few acknowledgements (or a
    /// failing `WAIT`) undo it and answer the error (see
    /// [`crate::redis::replica::unsynced`]), but for a `WAIT` that met a blip: its
    /// guard comes back unreleased, for the caller to give back in order
    /// ([`Synced::Blip`]). With replica sync off, the guard at once.
    async fn synced(&self, held: GuardCore) -> Result<Synced> {
        let named = self.spec.named();
        let client = &named.client;
        match crate::redis::replica::writes_synced(client.replicas(), &named.name, &named.key).await
        {
            Ok(()) => Ok(Synced::Kept(held)),
            Err(e) if is_blip(&e) => Ok(Synced::Blip(held, e)),
            Err(e) => {
                Err(crate::redis::replica::unsynced(&named.key, held, GuardCore::release, e).await)
            }
        }
    }
}

/// What the replica sync of an acquisition came to.
enum Synced {
    /// Synced (or replica sync is off).
    Kept(GuardCore),
    /// The `WAIT` met a blip `e`: whether the replicas have the grant is
    /// unknown, and the guard is not yet released.
    Blip(GuardCore, Error),
}

/// The calling owner holds already: count one more hold on the same token,
/// replica synced (see [`Grant::synced`]). `Ok(None)` when that hold turned
/// out to be lost (the caller then waits like anybody else).
///
/// A re-entry whose outcome a blip made unknown is sent again after a
/// pause while the wait lasts (`patience`), and its reply settles both: the
/// first one either did nothing, or counted the hold up once more in Redis
/// (harmless: the owner's last release drops its field whatever its count),
/// or, the hold having expired, granted afresh; the next one then finds
/// that fresh field under another token and replaces it with one more
/// fresh grant, which is given back as any fresh grant of a re-entry is.
async fn reenter<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    hold: &Arc<Hold>,
    lease_ms: i64,
    patience: &mut Patience<'_>,
) -> Result<Option<GuardCore>> {
    // Reserved first: the last other guard dropped meanwhile then only
    // counts down, a hold already released is never revived, and one
    // handed off to another owner id meanwhile is not re-entered.
    let client = &grant.spec.named().client;
    let Some(reserved) = Reservation::new(client, grant.slot, holder, hold, grant.watchdog) else {
        return Ok(None);
    };
    let (spec, slot) = (grant.spec, grant.slot);
    // Dropped after the undo (declared before it): see `Hold::turns`.
    // reintroduce: reentry-undo-after-next-flow
    let _turns = hold.turns();
    // A cancelled re-entry keeps the outer acquisition (its release may
    // still be on its way): its undo only removes a fresh grant it made.
    let mut undo = Undo::new(spec, slot, holder, Some(hold.token), None);
    let Some((reply, sent_at)) =
        send_reentry(grant, holder, hold, lease_ms, patience, &mut undo).await?
    else {
        return Ok(None);
    };
    match reply {
        Reply::Granted { token, .. } if token == hold.token => {
            // The lease estimate grows only once replicas acknowledged the
            // re-entry: undone, the outer hold keeps its estimate, and the
            // undo (releasing this guard) counts the hold down in Redis.
            // The lease the re-entry raised there stays longer than the
            // estimate: it only outlives our belief, which is safe.
            let guard = match grant.synced(grant.held(reserved.confirm())).await? {
                Synced::Kept(guard) => guard,
                Synced::Blip(guard, e) => {
                    // Counted down in the background (in any order with a
                    // re-entry sent again: counts only); the caller tries
                    // again after a pause.
                    drop(guard);
                    return Err(e);
                }
            };
            hold.extend_validity(sent_at, grant.lease);
            Ok(Some(guard))
        }
        Reply::Granted { token, .. } => {
            // Our earlier acquisition had expired, and the script granted
            // afresh: outside the owner's turn (another re-entry of the same
            // hold, or the owner's next flow, could take it over as stale),
            // so it is given back (token-checked) and the caller acquires
            // anew, in turn.
            hold.mark_lost("re-entry found it expired");
            let fresh = grant.new_held(holder.clone(), token, sent_at, None);
            fresh.hold().mark_lost("granted outside the owner's turn");
            let _ = fresh.release_in_order().await;
            Ok(None)
        }
        Reply::Busy { .. } => {
            hold.mark_lost("re-entry found it held by another owner");
            Ok(None)
        }
    }
}

/// Sends [`reenter`]'s attempt until a reply (with when it was sent),
/// riding out blips while `patience` lasts; `None` when the hold was lost
/// during an outage (nothing to re-enter; `undo` settles a try in doubt
/// before the owner's next acquisition).
async fn send_reentry<S: Spec>(
    grant: &Grant<'_, S>,
    holder: &Arc<str>,
    hold: &Arc<Hold>,
    lease_ms: i64,
    patience: &mut Patience<'_>,
    undo: &mut Undo<S>,
) -> Result<Option<(Reply, Instant)>> {
    let spec = grant.spec;
    loop {
        let sent_at = Instant::now();
        undo.arm(sent_at + spec.linger(grant.lease));
        let attempt = Try {
            holder,
            lease_ms,
            keep: Some(hold.token),
            enqueue: false,
            queued: false,
            number: 0,
            next_number: 0,
            expect_busy: false,
            ask: grant.ask,
            release: None,
        };
        let reply = run_attempt(spec, attempt).await;
        if !matches!(&reply, Err(e) if e.outcome_unknown()) {
            // A reply settles an earlier try in doubt too (see `reenter`).
            undo.disarm();
        }
        match reply {
            Ok(reply) => return Ok(Some((reply, sent_at))),
            Err(e) => {
                // Gives up with `e` unless it may be ridden out (the undo,
                // armed while the outcome is unknown, then runs in the
                // background).
                patience.pause(spec, e).await?;
                if hold.is_lost() {
                    return Ok(None);
                }
            }
        }
    }
}

/// Runs the undo an earlier cancelled call of `holder` left pending, so it
/// cannot land after this call's acquisition. Under the local turn (which
/// orders it with the background undo); a gate-less kind takes the turn for
/// just this; a bypass runs it without.
async fn settle_pending<S: Spec>(
    spec: &S,
    slot: &Slot,
    holder: &str,
    gate: Gate,
    have_turn: bool,
) -> Result<()> {
    if !spec.reentrant() || !slot.undos.has(holder) {
        return Ok(());
    }
    let _turn = if have_turn || gate == Gate::Bypass {
        None
    } else {
        slot.queue.gate.clone().acquire_owned().await.ok()
    };
    if slot.undos.has(holder) {
        // An error here is the caller's, in bounded time.
        spec.undo(slot, holder, None).await?;
        slot.undos.remove(holder);
    }
    Ok(())
}

/// The local turn (FIFO among this client's tasks) that `gate` asks for:
/// `Some(None)` for a gate that takes none, `None` when `deadline` passes
/// first, `Err(Shutdown)` when the client shuts down first. A local holder
/// whose lease ran out (by the local clock) is declared lost on the way, so
/// it does not keep the queue shut.
async fn gate_turn(
    gate: Gate,
    hub: &Hub,
    slot: &Slot,
    deadline: Option<Instant>,
) -> Result<Option<Option<OwnedSemaphorePermit>>> {
    if matches!(gate, Gate::None | Gate::Bypass) {
        return Ok(Some(None));
    }
    let turn = wait_for_turn(hub, slot, &slot.queue.gate, deadline).await?;
    if turn.is_some() {
        if let Some(until) = slot.queue.take_yield() {
            // The last local holder gives remote waiters a turn.
            tokio::time::sleep_until(until).await;
        }
    }
    Ok(turn.map(Some))
}

/// A permit of `turn` (the slot's gate, or an owner's turn): [`gate_turn`]
/// without the yield to remote waiters.
async fn wait_for_turn(
    hub: &Hub,
    slot: &Slot,
    turn: &Arc<tokio::sync::Semaphore>,
    deadline: Option<Instant>,
) -> Result<Option<OwnedSemaphorePermit>> {
    // Free turn (nobody local holds or waits: the semaphore hands freed
    // permits to queued waiters first, so this never jumps the queue): no
    // timer, no select.
    if let Ok(permit) = turn.clone().try_acquire_owned() {
        hub.check_open()?;
        return Ok(Some(permit));
    }
    let acquire = turn.clone().acquire_owned();
    tokio::pin!(acquire);
    loop {
        // A holder that comes later (its grant was in flight) is looked
        // for again after TURN_LOOK: its lease end bounds the wait.
        let holders = slot
            .holds
            .earliest_deadline()
            .unwrap_or_else(|| Instant::now() + TURN_LOOK);
        let wake = Some(deadline.map_or(holders, |d| d.min(holders)));
        let sleep = async {
            match wake {
                Some(wake) => tokio::time::sleep_until(wake).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = hub.closing() => return Err(Error::Shutdown),
            permit = &mut acquire => {
                hub.check_open()?;
                return Ok(permit.ok());
            }
            () = sleep => {
                for hold in slot.holds.all() {
                    let _ = hold.is_lost();
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok((&mut acquire).now_or_never().and_then(std::result::Result::ok));
                }
            }
        }
    }
}

/// One more guard of a hold, reserved before its re-entry is sent. While
/// reserved, a guard dropped meanwhile is not the last one, so it only
/// counts down in Redis. Dropped unconfirmed (the re-entry failed or was
/// cancelled), the reservation is given back.
struct Reservation {
    client: Arc<crate::engine::client_inner::ClientInner>,
    slot: SlotRef,
    hold: Option<Arc<Hold>>,
    watchdog: bool,
}

impl Reservation {
    /// `None` once the hold's last guard is gone (see [`Hold::add_guard`]).
    fn new(
        client: &Arc<crate::engine::client_inner::ClientInner>,
        slot: &SlotRef,
        owner: &str,
        hold: &Arc<Hold>,
        watchdog: bool,
    ) -> Option<Reservation> {
        hold.add_guard(owner, watchdog).then(|| Reservation {
            client: client.clone(),
            slot: slot.clone(),
            hold: Some(hold.clone()),
            watchdog,
        })
    }

    /// The re-entry was granted with the hold's token: the guard is real
    /// (its lease estimate is the caller's to raise, once synced).
    fn confirm(mut self) -> Arc<Hold> {
        self.hold
            .take()
            .unwrap_or_else(|| unreachable!("confirmed twice"))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            // Not granted: give the reservation back. If the other guards
            // went meanwhile (they only counted down in Redis), it was the
            // last: the hold is released, whatever our re-entries counted
            // up (the final release drops the owner's field, token-checked;
            // a re-entry still in flight ran before it on the connection).
            if super::guard_core::detach(&self.slot, &hold, self.watchdog) {
                super::guard_core::release_in_background(
                    self.client.clone(),
                    self.slot.clone(),
                    hold,
                    true,
                );
            }
        }
    }
}

/// A waiting holder's registration for messages addressed to it.
struct Registration<'a> {
    slot: &'a Slot,
    holder: &'a str,
    wakeup: Arc<Wakeup>,
}

impl<'a> Registration<'a> {
    fn new(slot: &'a Slot, holder: &'a Arc<str>) -> Registration<'a> {
        Registration {
            slot,
            holder,
            wakeup: slot.wakeups.register(holder),
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.slot.wakeups.unregister(self.holder);
    }
}
