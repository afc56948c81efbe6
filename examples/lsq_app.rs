//! A program of your own with every `sfb` command: it registers the least-squares model
//! of `custom_model.rs` as `--model lsq`, beside the built-in models.
//!
//! ```sh
//! cargo build --example lsq_app
//! APP=target/debug/examples/lsq_app
//! $APP run --model lsq --peers 4 --clocks 200                     # threads
//! $APP run --model lsq --peers 4 --clocks 200 --transport libp2p  # 4 processes of lsq_app
//! $APP sim --model lsq --peers 64 --out-degree 3 --clocks 200     # simulated seconds
//! $APP run --model lsq --backend fms                              # parameter server
//! $APP cluster init --peers 4 --dir c --base-port free            # then, on each machine:
//! $APP peer --model lsq --cluster c/cluster.toml --id 0           # … --id 1, 2, 3
//! ```
//!
//! The command line's settings (peers, clocks, batch, topology, optimizer, …) apply to the
//! registered model as to a built-in one; the program gives the model, W's shape and the
//! data.
#[path = "shared/lsq.rs"]
mod lsq;

use ndarray::Array2;
use sfb::harness::{Cluster, RunSpec};

fn main() -> std::process::ExitCode {
    sfb::app::App::new("lsq_app")
        .model("lsq", |_spec: &RunSpec| {
            let (truth, mut samples) = lsq::problem(4500);
            let held_out = samples.split_off(4000);
            Ok(Cluster::builder()
                .model(|_| lsq::LeastSquares)
                .init_w(Array2::zeros(truth.dim()))
                .data(samples)
                .evaluator(move |_| Box::new(lsq::HalfMse(held_out.clone()))))
        })
        .main()
}
