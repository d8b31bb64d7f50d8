//! The async runtime Raft runs on: tokio's, with one change. The randomness openraft draws
//! (election timeouts, the first heartbeat's phase) comes from the simulation's seeded generator
//! inside a simulation, so that a seed determines its elections; everywhere else it is seeded
//! from the operating system, as openraft's tokio runtime is.

use std::future::Future;
use std::time::Duration;

use openraft::OptionalSend;
use openraft::TokioRuntime;
use openraft::async_runtime::{AsyncRuntime, Select2, Select3, Select4};
use rand::SeedableRng;
use rand::rngs::SmallRng;

#[derive(Debug)]
pub struct NodeRuntime {
    inner: TokioRuntime,
}

impl AsyncRuntime for NodeRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;
    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F>(duration: Duration, future: F) -> Self::Timeout<R, F>
    where
        F: Future<Output = R> + OptionalSend,
    {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F>
    where
        F: Future<Output = R> + OptionalSend,
    {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn select2<A, B>(a: A, b: B) -> impl Future<Output = Select2<A::Output, B::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
    {
        TokioRuntime::select2(a, b)
    }

    fn select3<A, B, C>(
        a: A,
        b: B,
        c: C,
    ) -> impl Future<Output = Select3<A::Output, B::Output, C::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
    {
        TokioRuntime::select3(a, b, c)
    }

    fn select4<A, B, C, D>(
        a: A,
        b: B,
        c: C,
        d: D,
    ) -> impl Future<Output = Select4<A::Output, B::Output, C::Output, D::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
        D: Future + OptionalSend,
    {
        TokioRuntime::select4(a, b, c, d)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> SmallRng {
        SmallRng::seed_from_u64(crate::simulation::draw().unwrap_or_else(rand::random))
    }

    fn new(threads: usize) -> Self {
        NodeRuntime { inner: TokioRuntime::new(threads) }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.inner.block_on(future)
    }

    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, std::io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        TokioRuntime::spawn_blocking(f)
    }
}
