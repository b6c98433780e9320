//! Helpers the front-end tests share: an adapter that records report instances (and reads
//! their variables back), a quota adapter whose storage is down, and a gRPC codec that sends raw bytes (to put malformed
//! messages on the wire), and the golden-file comparison of attribute bags.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, QuotaArgs,
    QuotaHandler, ReportHandler, Stability,
};
use mixer_model::{AttributeBag, Instance, LogEntryInstance, QuotaResult, Template};

/// Records every report instance it is given, after `delay` (a slow backend when not zero).
pub struct Recorder {
    records: Arc<Mutex<Vec<Instance>>>,
    delay: Duration,
}

impl Recorder {
    /// Records into `records` at once.
    pub fn new(records: Arc<Mutex<Vec<Instance>>>) -> Recorder {
        Recorder::slow(records, Duration::ZERO)
    }

    /// Records into `records`, taking `delay` per batch.
    pub fn slow(records: Arc<Mutex<Vec<Instance>>>, delay: Duration) -> Recorder {
        Recorder { records, delay }
    }
}

static RECORDER: AdapterInfo = AdapterInfo {
    name: "recorder",
    description: "records report instances",
    templates: &[Template::LogEntry],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Recorder {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &RECORDER
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(RecorderHandler {
            records: self.records.clone(),
            delay: self.delay,
        }))
    }
}

struct RecorderHandler {
    records: Arc<Mutex<Vec<Instance>>>,
    delay: Duration,
}

impl Handler for RecorderHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for RecorderHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.records
            .lock()
            .expect("not poisoned")
            .extend(instances.iter().cloned());
        Ok(())
    }
}

/// Sends raw bytes as gRPC messages (no protobuf encoding on our side).
#[derive(Clone, Copy)]
pub struct RawCodec;

/// [`RawCodec`]'s encoder.
pub struct RawEncoder;
/// [`RawCodec`]'s decoder.
pub struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

/// A quota adapter whose storage is always down: every allocation fails UNAVAILABLE with
/// `message`.
pub struct QuotaDown {
    info: AdapterInfo,
    message: &'static str,
}

impl QuotaDown {
    /// Registered as adapter `name`.
    pub fn new(name: &'static str, message: &'static str) -> QuotaDown {
        QuotaDown {
            info: AdapterInfo {
                name,
                description: "quota storage down",
                templates: &[Template::Quota],
                cacheable: false,
                stability: Stability::Alpha,
            },
            message,
        }
    }
}

impl Adapter for QuotaDown {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &self.info
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(QuotaDownHandler(self.message)))
    }
}

struct QuotaDownHandler(&'static str);

impl Handler for QuotaDownHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for QuotaDownHandler {
    async fn allocate(&self, _: &Instance, _: &QuotaArgs) -> Result<QuotaResult, AdapterError> {
        Err(AdapterError::transient(ErrorKind::Unavailable, self.0))
    }
}

/// A recorded instance's variables, as text.
pub type Vars = BTreeMap<String, String>;

/// The variables of each recorded instance.
pub fn recorded(records: &Mutex<Vec<Instance>>) -> Vec<Vars> {
    records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| {
            LogEntryInstance::of(i)
                .expect("a logentry")
                .variables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// Instances arrive from the handler's queue after the request was answered: wait (a bounded
/// time) until `n` have arrived, then a little longer to catch any extra one.
pub async fn wait_recorded(records: &Mutex<Vec<Instance>>, n: usize) -> Vec<Vars> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while records.lock().expect("not poisoned").len() < n && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    recorded(records)
}

/// One variable of a recorded instance.
pub fn var<'a>(vars: &'a Vars, name: &str) -> Option<&'a str> {
    vars.get(name).map(String::as_str)
}

/// The bag as `name=value` lines, sorted by name: the golden files' format.
pub fn render_bag(bag: &AttributeBag) -> String {
    let mut lines: Vec<String> = bag
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// Compares `actual` with the golden file `dir/name.txt`; with `UPDATE_GOLDEN=1` set, writes
/// it instead.
pub fn assert_golden(dir: &Path, name: &str, actual: &str) {
    let path = dir.join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(dir).expect("golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}
