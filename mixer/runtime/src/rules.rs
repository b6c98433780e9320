//! A snapshot's rules, split by namespace and by variety, each set with its literal index:
//! what evaluation walks.

use mixer_config::{Config, MatchErrorPolicy};
use mixer_model::{AttrId, Variety};

use crate::index::RuleIndex;

/// Rules of one namespace, with their index.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    /// Indices into `Config::rules`, in config order.
    pub rules: Vec<usize>,
    pub index: RuleIndex,
    /// Instances of all its rules' actions: room for every dispatch an evaluation can make.
    pub instances: usize,
}

impl RuleSet {
    /// `match_error_policy`: what a rule whose match fails does when it does not say.
    fn build(config: &Config, rules: Vec<usize>, match_error_policy: MatchErrorPolicy) -> RuleSet {
        let constraints: Vec<_> = rules
            .iter()
            .map(|&r| {
                config.rules[r]
                    .match_expr
                    .as_ref()
                    .map(|m| m.equality_constraints())
                    .unwrap_or_default()
            })
            .collect();
        let deny_on_error: Vec<bool> = rules
            .iter()
            .map(|&r| {
                config.rules[r]
                    .match_error_policy
                    .unwrap_or(match_error_policy)
                    == MatchErrorPolicy::Deny
            })
            .collect();
        let actions = rules.iter().flat_map(|&r| &config.rules[r].actions);
        RuleSet {
            index: RuleIndex::build(&constraints, &deny_on_error),
            instances: actions.map(|a| a.instances.len()).sum(),
            rules,
        }
    }
}

/// A namespace's rules split by what they are for. A check evaluates only the rules with a
/// check action or header operations; a report only those with report actions; so a check
/// never reads (nor references) what only a report rule needs, as in Istio.
#[derive(Debug, Default)]
pub(crate) struct ByVariety {
    sets: [RuleSet; 4],
}

impl ByVariety {
    /// The sets of `rules` (indices into `config.rules`).
    pub(crate) fn build(
        config: &Config,
        rules: &[usize],
        match_error_policy: MatchErrorPolicy,
    ) -> ByVariety {
        let for_variety = |v: Variety| {
            let relevant = rules
                .iter()
                .copied()
                .filter(|&r| {
                    let rule = &config.rules[r];
                    let has_action = rule.actions.iter().any(|a| {
                        a.instances.iter().any(|&i| {
                            config
                                .instances
                                .get(i)
                                // A decision-log instance is sent once a decision is
                                // made (`crate::decision_log`), never by evaluation.
                                .is_some_and(|ic| ic.serves(v) && ic.decision_log.is_none())
                        })
                    });
                    let has_headers = !rule.request_header_operations.is_empty()
                        || !rule.response_header_operations.is_empty();
                    has_action || (v == Variety::Check && has_headers)
                })
                .collect();
            RuleSet::build(config, relevant, match_error_policy)
        };
        ByVariety {
            sets: [
                for_variety(Variety::Check),
                for_variety(Variety::Quota),
                for_variety(Variety::Report),
                for_variety(Variety::AttributeGenerator),
            ],
        }
    }

    pub(crate) fn get(&self, variety: Variety) -> &RuleSet {
        match variety {
            Variety::Check => &self.sets[0],
            Variety::Quota => &self.sets[1],
            Variety::Report => &self.sets[2],
            Variety::AttributeGenerator => &self.sets[3],
        }
    }

    /// Rules filed in the literal index, over the three sets.
    pub(crate) fn indexed(&self) -> usize {
        self.sets.iter().map(|s| s.index.indexed()).sum()
    }
}

/// Attribute ids the dispatcher reads to scope rules by namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdentityAttrs {
    pub reporter_kind: Option<AttrId>,
    pub source_namespace: Option<AttrId>,
    pub destination_namespace: Option<AttrId>,
}
