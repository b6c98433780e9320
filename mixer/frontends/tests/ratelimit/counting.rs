//! A small memquota-like counting quota adapter that records what it is asked.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, QuotaArgs,
    QuotaHandler, Stability,
};
use mixer_model::{Code, Instance, QuotaInstance, QuotaLimit, QuotaResult, Status, Template};

/// One allocation the counting adapter saw: (instance name, dimensions as text, amount).
pub(crate) type Call = (String, Vec<(String, String)>, i64);
/// Every allocation it saw.
pub(crate) type Calls = Arc<Mutex<Vec<Call>>>;

/// A quota adapter named like memquota, with its params' shape (`quotas: [{name, maxAmount,
/// validDuration}]`): counts per instance and dimensions, never resets (tests are short), and
/// reports the limit and what is left as memquota does. A caller's limit override replaces
/// the configured amount and window.
pub(crate) struct Counting(pub(crate) Calls);

static COUNTING: AdapterInfo = AdapterInfo {
    name: "memquota",
    description: "counts quota per instance and dimensions",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Counting {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &COUNTING
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, params: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        let mut limits = HashMap::new();
        for q in params
            .get("quotas")
            .and_then(|q| q.as_array())
            .into_iter()
            .flatten()
        {
            let name = q["name"].as_str().unwrap_or_default().to_string();
            let max = q["maxAmount"].as_i64().unwrap_or(0);
            let window = q["validDuration"]
                .as_str()
                .and_then(mixer_model::Duration::parse)
                .map_or(Duration::from_secs(1), |d| d.to_std());
            limits.insert(name, (max, window));
        }
        Ok(Arc::new(CountingHandler {
            limits,
            used: Mutex::new(HashMap::new()),
            calls: self.0.clone(),
        }))
    }
}

struct CountingHandler {
    limits: HashMap<String, (i64, Duration)>,
    used: Mutex<HashMap<String, i64>>,
    calls: Calls,
}

impl Handler for CountingHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for CountingHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        let dims: Vec<(String, String)> = QuotaInstance::of(instance)
            .expect("a quota instance")
            .dimensions
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.calls.lock().expect("not poisoned").push((
            instance.name.to_string(),
            dims.clone(),
            args.amount,
        ));
        let short = instance.name.split('.').next().unwrap_or_default();
        let (name, &(mut max, mut window)) = self
            .limits
            .get_key_value(instance.name.as_ref())
            .or_else(|| self.limits.get_key_value(short))
            .ok_or_else(|| {
                AdapterError::permanent(ErrorKind::InvalidInstance, "no quota configured")
            })?;
        if let Some(o) = args.limit_override {
            (max, window) = (o.max_amount, o.window);
        }
        let key = format!("{}{dims:?}{window:?}", instance.name);
        let mut used = self.used.lock().expect("not poisoned");
        let count = used.entry(key).or_insert(0);
        let over = *count + args.amount > max;
        if !over {
            *count += args.amount;
        }
        let limit = Some(QuotaLimit {
            name: name.as_str().into(),
            max_amount: max,
            window,
            remaining: max - *count,
            reset_after: window,
            retry_after: if over { window } else { Duration::ZERO },
        });
        if over {
            return Ok(QuotaResult {
                status: Status::new(Code::ResourceExhausted, "over the limit"),
                valid_duration: window,
                granted_amount: 0,
                limit,
            });
        }
        Ok(QuotaResult {
            status: Status::OK,
            valid_duration: window,
            granted_amount: args.amount,
            limit,
        })
    }
}
